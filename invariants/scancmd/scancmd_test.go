package scancmd

import (
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/tenants"
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

func TestScanHelp(t *testing.T) {
	t.Parallel()
	for _, h := range []string{"--help", "-h"} {
		code, out, errs := run(h)
		require.Equal(t, ExitClean, code)
		require.Empty(t, errs)
		require.Contains(t, out, Usage)
		for _, f := range []string{"-canaries", "-json", "-ignore-own", "-home", "-launch", "-allow-special"} {
			require.Regexp(t, `(?m)^  `+f+`\b`, out, "help lists %s", f)
		}
	}
}

// fifo makes a named pipe in a fresh folder.
func fifo(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "pipe")
	require.NoError(t, syscall.Mkfifo(p, 0o600))
	return p
}

// TestSpecialPathsRefused: a named pipe or a device given as PATH is an
// error naming it, before anything is scanned (no finding printed).
func TestSpecialPathsRefused(t *testing.T) {
	t.Parallel()
	canaries, _, dirty := setup(t)
	p := fifo(t)
	for _, tc := range []struct{ path, kind string }{{p, "a named pipe (FIFO)"}, {"/dev/null", "a character device"}} {
		code, out, errs := run("--canaries", canaries, dirty, tc.path)
		require.Equal(t, ExitError, code)
		require.Empty(t, out, "nothing scanned")
		require.Contains(t, errs, tc.path+" is "+tc.kind+", not a regular file or folder")
		require.Contains(t, errs, "--allow-special")
	}
}

// TestAllowSpecialReadsAPipe: with --allow-special a pipe's bytes are
// scanned to its writer's end; a device is read up to the bound.
func TestAllowSpecialReadsAPipe(t *testing.T) {
	t.Parallel()
	canaries, _, _ := setup(t)
	p := fifo(t)
	done := make(chan error, 1)
	go func() {
		w, err := os.OpenFile(p, os.O_WRONLY, 0) // waits for the scan to open it
		if err != nil {
			done <- err
			return
		}
		_, err = w.Write([]byte("piped: " + alphaKey + "\n"))
		done <- errors.Join(err, w.Close())
	}()
	code, out, errs := run("--allow-special", "--canaries", canaries, p)
	require.NoError(t, <-done)
	require.Equal(t, ExitFound, code, errs)
	require.Equal(t, "alpha provider_key raw "+p+":7\n", out)
}

// TestAllowSpecialDeviceBounded: /dev/zero is read up to the bound (here
// lowered to 64 MiB) and the scan says where it stopped. Not parallel: it
// sets the bound.
func TestAllowSpecialDeviceBounded(t *testing.T) {
	defer func(b int64) { specialBytes = b }(specialBytes)
	specialBytes = 64 << 20
	canaries, _, _ := setup(t)
	code, out, errs := run("--allow-special", "--canaries", canaries, "/dev/zero")
	require.Equal(t, ExitError, code)
	require.Empty(t, out)
	require.Contains(t, errs, "not scanned: /dev/zero: stopped after 67108864 bytes")
}

// TestInterruptEndsAPipeRead: a pipe whose writer never ends it is read
// until the run's context ends, which the scan reports.
func TestInterruptEndsAPipeRead(t *testing.T) {
	t.Parallel()
	canaries, _, _ := setup(t)
	p := fifo(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opened := make(chan *os.File, 1)
	go func() {
		w, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err == nil {
			_, _ = w.Write([]byte("some bytes, and then nothing more for ever\n"))
		}
		opened <- w
		cancel() // the "SIGINT": the scan has the pipe open and waits on it
	}()
	var out, errb bytes.Buffer
	code := Run(ctx, []string{"--allow-special", "--canaries", canaries, p}, &out, &errb)
	w := <-opened
	require.NotNil(t, w)
	require.NoError(t, w.Close())
	require.Equal(t, ExitError, code)
	require.Contains(t, errb.String(), "not scanned: "+p)
}

// TestCanariesFileBounded: --canaries that is a pipe, a device or a file
// over the bound is refused at once, naming it; a canceled run does not
// read it.
func TestCanariesFileBounded(t *testing.T) {
	t.Parallel()
	_, clean, _ := setup(t)
	big := filepath.Join(t.TempDir(), "big.json")
	f, err := os.Create(big)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(MaxCanariesBytes+1))
	require.NoError(t, f.Close())
	p := fifo(t)
	for _, tc := range []struct{ file, want string }{
		{p, p + " is a named pipe (FIFO), not a regular file"},
		{"/dev/zero", "/dev/zero is a character device, not a regular file"},
		{big, "over the 16777216-byte bound"},
	} {
		code, out, errs := run("--canaries", tc.file, clean)
		require.Equal(t, ExitError, code)
		require.Empty(t, out)
		require.Contains(t, errs, tc.want)
	}
	canaries, _, _ := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errb bytes.Buffer
	require.Equal(t, ExitError, Run(ctx, []string{"--canaries", canaries, clean}, &out, &errb))
	require.Contains(t, errb.String(), "context canceled")
}

// roster writes a roster of a launch tenant "default" and profiles alpha
// and beta, as `canary-run fakellm` would, and returns its path and the
// tenants' canaries by name.
func roster(t *testing.T) (string, map[string][]tenants.Canary) {
	t.Helper()
	r := tenants.Roster{Version: tenants.RosterVersion, Launch: "default", Journal: "/nowhere/journal.jsonl"}
	own := map[string][]tenants.Canary{}
	for i, name := range []string{"default", "alpha", "beta"} {
		tag := fmt.Sprintf("%010x", 0xabc0+i)
		rt := tenants.RosterTenant{Name: name, Tag: tag, Launch: i == 0, BaseURL: "http://127.0.0.1:1/" + name,
			Key: tenants.CanaryValue(tenants.ProviderKey, name, tag), Model: tenants.CanaryValue(tenants.Model, name, tag),
			APIServerKey: tenants.CanaryValue(tenants.APIServerKey, name, tag),
			Workdir:      "/work/" + tenants.CanaryValue(tenants.Workdir, name, tag)}
		for _, k := range tenants.BaseKinds {
			rt.Canaries = append(rt.Canaries, tenants.Canary{Owner: name, Kind: k, Value: tenants.CanaryValue(k, name, tag)})
		}
		own[name] = rt.Canaries
		r.Tenants = append(r.Tenants, rt)
	}
	path := filepath.Join(t.TempDir(), "tenants.json")
	require.NoError(t, tenants.WriteRoster(path, r))
	return path, own
}

// TestRosterAndIgnoreOwn: a roster is a canaries file; with --ignore-own
// each tenant's canaries in its own home are counted, not reported, and a
// canary in another tenant's home still is.
func TestRosterAndIgnoreOwn(t *testing.T) {
	t.Parallel()
	rpath, own := roster(t)
	key := func(name string) string { return own[name][0].Value }
	home := filepath.Join(t.TempDir(), "home", ".agentd")
	write := func(rel, content string) string {
		p := filepath.Join(home, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	write(".env", "KEY="+key("default")+"\n")
	write("profiles/alpha/.env", "KEY="+key("alpha")+"\n")
	write("profiles/beta/.env", "KEY="+key("beta")+"\n")
	leak := write("profiles/beta/memories/m.md", "remember "+key("alpha")+"\n")
	launchLeak := write("logs/agent.log", "beta said "+key("beta")+"\n")

	code, out, errs := run("--canaries", rpath, home)
	require.Equal(t, ExitFound, code, errs)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 5, "every canary without --ignore-own")

	code, out, errs = run("--canaries", rpath, "--ignore-own", home)
	require.Equal(t, ExitFound, code, errs)
	require.Equal(t, "beta provider_key raw "+launchLeak+":10\nalpha provider_key raw "+leak+":9\n", out)
	require.Contains(t, errs, "3 canaries in their owner's own home ignored")

	// The same tree under another name, attributed by --home.
	moved := filepath.Join(t.TempDir(), "launch")
	require.NoError(t, os.Rename(home, moved))
	code, out, errs = run("--canaries", rpath, "--ignore-own", "--home", moved, moved)
	require.Equal(t, ExitFound, code, errs)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 2, out)
	require.Contains(t, errs, "3 canaries in their owner's own home ignored")

	code, _, errs = run("--canaries", rpath, "--home", moved, moved)
	require.Equal(t, ExitError, code)
	require.Contains(t, errs, "need --ignore-own")
}

// TestNestedFindingNamesItsPath: a canary in a gzip inside a zip is
// reported with every layer.
func TestNestedFindingNamesItsPath(t *testing.T) {
	t.Parallel()
	canaries, _, _ := setup(t)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err := zw.Write([]byte("old key " + alphaKey))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	var zb bytes.Buffer
	z := zip.NewWriter(&zb)
	w, err := z.Create("profiles/gone/.env.gz")
	require.NoError(t, err)
	_, err = w.Write(gz.Bytes())
	require.NoError(t, err)
	require.NoError(t, z.Close())
	path := filepath.Join(t.TempDir(), "backup.zip")
	require.NoError(t, os.WriteFile(path, zb.Bytes(), 0o600))
	code, out, errs := run("--canaries", canaries, path)
	require.Equal(t, ExitFound, code, errs)
	require.Equal(t, "alpha provider_key raw "+path+"!zip:profiles/gone/.env.gz!gzip:8\n", out)
}

// TestSparseDatabaseNotCopied: a sparse 2 GiB file with a SQLite header is
// not copied into TMPDIR; its bytes are scanned in place and the rows not
// read are reported (exit 2). Not parallel: it sets TMPDIR.
func TestSparseDatabaseNotCopied(t *testing.T) {
	canaries, _, _ := setup(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	path := filepath.Join(t.TempDir(), "state.db")
	f, err := os.Create(path)
	require.NoError(t, err)
	_, err = f.Write(append([]byte("SQLite format 3\x00"), make([]byte, 84)...))
	require.NoError(t, err)
	_, err = f.WriteAt([]byte(alphaKey), 1<<30)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(2<<30))
	require.NoError(t, f.Close())
	code, out, errs := run("--canaries", canaries, path)
	require.Equal(t, ExitError, code)
	require.Equal(t, fmt.Sprintf("alpha provider_key raw %s:%d\n", path, 1<<30), out)
	require.Contains(t, errs, "is 2147483648 bytes, over the 268435456-byte bound")
	require.Contains(t, errs, "its rows were not read")
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.Empty(t, left, "nothing copied to TMPDIR")
}
