package scancmd

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	alphaKey  = "provider-key-alpha-3f9a0c1b2d"
	betaModel = "model-beta-00aa11bb22"
)

func setup(t *testing.T) (canaries, clean, dirty string) {
	t.Helper()
	dir := t.TempDir()
	canaries = filepath.Join(dir, "canaries.json")
	require.NoError(t, os.WriteFile(canaries, []byte(`[
		{"owner":"alpha","kind":"provider_key","value":"`+alphaKey+`"},
		{"owner":"beta","kind":"model","value":"`+betaModel+`"}]`), 0o600))
	clean = filepath.Join(dir, "clean")
	require.NoError(t, os.MkdirAll(clean, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(clean, "a.log"), []byte("alpha beta 3f9a0c1b2d model-beta-\n"), 0o600))
	dirty = filepath.Join(dir, "dirty")
	require.NoError(t, os.MkdirAll(filepath.Join(dirty, "logs"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dirty, "config.yaml"), []byte("key: "+alphaKey+"\n"), 0o600))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err := zw.Write([]byte("auth=" + base64.StdEncoding.EncodeToString([]byte(betaModel))))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dirty, "logs", "old.log.gz"), gz.Bytes(), 0o600))
	return canaries, clean, dirty
}

func run(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestScanCommand(t *testing.T) {
	t.Parallel()
	canaries, clean, dirty := setup(t)

	code, out, errs := run("--canaries", canaries, clean)
	require.Equal(t, ExitClean, code, errs)
	require.Empty(t, out)
	require.Empty(t, errs)

	code, out, errs = run("--canaries", canaries, clean, dirty)
	require.Equal(t, ExitFound, code, errs)
	require.Equal(t, "alpha provider_key raw "+filepath.Join(dirty, "config.yaml")+":5\n"+
		"beta model base64 "+filepath.Join(dirty, "logs", "old.log.gz")+"!gzip:5\n", out)

	// Flags may follow the paths; --json gives one object a line.
	code, out, errs = run(dirty, "--json", "--canaries="+canaries)
	require.Equal(t, ExitFound, code, errs)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2)
	var f JSONFinding
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &f))
	require.Equal(t, "beta", f.Owner)
	require.Equal(t, "model", f.Kind)
	require.Equal(t, "base64", f.Encoding)
	require.Equal(t, "gzip", f.Container)
	require.Equal(t, int64(5), f.Offset)
	require.NotEmpty(t, f.Excerpt)
}

func TestScanCommandErrors(t *testing.T) {
	t.Parallel()
	canaries, clean, dirty := setup(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"owner":"a"}`), 0o600))
	short := filepath.Join(dir, "short.json")
	require.NoError(t, os.WriteFile(short, []byte(`[{"owner":"a","kind":"k","value":"tiny"}]`), 0o600))
	empty := filepath.Join(dir, "empty.json")
	require.NoError(t, os.WriteFile(empty, []byte(`[]`), 0o600))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no canaries flag", []string{clean}, "--canaries FILE is required"},
		{"no path", []string{"--canaries", canaries}, "no PATH to scan"},
		{"unknown flag", []string{"--canaries", canaries, "--fast", clean}, "flag provided but not defined: -fast"},
		{"missing canaries file", []string{"--canaries", filepath.Join(dir, "nope.json"), clean}, "no such file"},
		{"not an array", []string{"--canaries", bad, clean}, "want a JSON array"},
		{"short value", []string{"--canaries", short, clean}, "shorter than 8 bytes"},
		{"empty list", []string{"--canaries", empty, clean}, "nothing to look for"},
	} {
		code, out, errs := run(tc.args...)
		require.Equal(t, ExitError, code, tc.name)
		require.Empty(t, out, tc.name)
		require.Contains(t, errs, tc.want, tc.name)
	}

	// A path that cannot be read is reported, and makes the run exit 2
	// even though what could be read was scanned.
	code, out, errs := run("--canaries", canaries, dirty, filepath.Join(dir, "missing"))
	require.Equal(t, ExitError, code)
	require.Contains(t, out, "alpha provider_key raw")
	require.Contains(t, errs, "not scanned: "+filepath.Join(dir, "missing"))
}

// TestDoubleDashEndsFlags: a path may start with a dash after "--". (Not
// parallel: it changes the working directory.)
func TestDoubleDashEndsFlags(t *testing.T) {
	canaries, _, _ := setup(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "-odd"), []byte(alphaKey), 0o600))
	t.Chdir(dir)
	code, out, errs := run("--canaries", canaries, "--", "-odd")
	require.Equal(t, ExitFound, code, errs)
	require.Equal(t, "alpha provider_key raw -odd:0\n", out)
}
