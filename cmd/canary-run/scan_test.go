package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/internal/syncio"

	"github.com/tenantcanary/tenantcanary/invariants/scancmd"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// TestScanEndToEnd runs `canary-run scan` on files it writes: clean (0),
// a foreign key hidden in base64 (1), a path that is not there (2).
func TestScanEndToEnd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	alphaKey := tenants.CanaryValue(tenants.ProviderKey, "alpha", "0a1b2c3d4e")
	betaMemory := tenants.CanaryValue(tenants.Memory, "beta", "99aa88bb77")
	data, err := json.Marshal([]tenants.Canary{
		{Owner: "alpha", Kind: tenants.ProviderKey, Value: alphaKey},
		{Owner: "beta", Kind: tenants.Memory, Value: betaMemory},
	})
	require.NoError(t, err)
	canaries := writeFile(t, dir, "canaries.json", string(data))

	clean := filepath.Join(dir, "clean")
	require.NoError(t, os.MkdirAll(clean, 0o755))
	// Near misses stay clean: the bare tag, a name alone, a cut key.
	writeFile(t, clean, "log.txt", "alpha beta 0a1b2c3d4e "+alphaKey[:len(alphaKey)-1]+"\n")
	code, stdout, stderr := runCLI(t, "scan", "--canaries", canaries, clean)
	require.Equal(t, 0, code, stderr)
	require.Empty(t, stdout)

	dirty := filepath.Join(dir, "dirty")
	require.NoError(t, os.MkdirAll(filepath.Join(dirty, "profiles", "beta"), 0o755))
	leaked := "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("x:"+alphaKey)) + "\n"
	writeFile(t, filepath.Join(dirty, "profiles", "beta"), "agent.log", leaked)
	code, stdout, stderr = runCLI(t, "scan", "--canaries", canaries, clean, dirty)
	require.Equal(t, 1, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 1, stdout)
	require.Regexp(t, `^alpha provider_key base64 \S+/dirty/profiles/beta/agent\.log:\d+$`, lines[0])

	code, stdout, _ = runCLI(t, "scan", "--json", "--canaries", canaries, dirty)
	require.Equal(t, 1, code)
	var f scancmd.JSONFinding
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(stdout)), &f))
	require.Equal(t, "alpha", f.Owner)
	require.Equal(t, "base64", f.Encoding)

	code, _, stderr = runCLI(t, "scan", "--canaries", canaries, filepath.Join(dir, "missing"))
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "missing")
}

// canariesAndPipe writes a canaries file of one model canary and makes a
// named pipe (no writer yet), each in a temp dir of its own.
func canariesAndPipe(t *testing.T) (canaries, pipe string) {
	t.Helper()
	canaries = filepath.Join(t.TempDir(), "canaries.json")
	require.NoError(t, os.WriteFile(canaries, []byte(`[{"owner":"alpha","kind":"model","value":"model-alpha-0011223344"}]`), 0o600))
	pipe = filepath.Join(t.TempDir(), "pipe")
	require.NoError(t, syscall.Mkfifo(pipe, 0o600))
	return canaries, pipe
}

func TestScanHelpAndSpecialPaths(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runCLI(t, "scan", "--help")
	require.Equal(t, 0, code)
	require.Empty(t, stderr)
	require.Contains(t, stdout, scancmd.Usage)
	require.Contains(t, stdout, "-ignore-own")

	canaries, pipe := canariesAndPipe(t)
	code, stdout, stderr = runCLI(t, "scan", "--canaries", canaries, pipe)
	require.Equal(t, 2, code)
	require.Empty(t, stdout)
	require.Contains(t, stderr, pipe+" is a named pipe (FIFO)")
	code, _, stderr = runCLI(t, "scan", "--canaries", pipe, t.TempDir())
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "read canaries")
	require.Contains(t, stderr, "not a regular file")
}

// TestSIGTERMEndsAPipeScan: `scan --allow-special` on a pipe whose writer
// never ends it stops at SIGTERM, with exit 2. Not parallel: the signal is
// process-wide.
func TestSIGTERMEndsAPipeScan(t *testing.T) {
	canaries, pipe := canariesAndPipe(t)
	var stderr syncio.Buffer
	ctx, stop := interruptible(context.Background(), &stderr)
	defer stop()
	writer := make(chan *os.File, 1)
	go func() {
		w, err := os.OpenFile(pipe, os.O_WRONLY, 0) // returns once the scan has the pipe open
		if err == nil {
			_, _ = w.Write([]byte("a first line, then silence\n"))
			_ = syscall.Kill(syscall.Getpid(), syscall.SIGTERM)
		}
		writer <- w
	}()
	var stdout syncio.Buffer
	code := dispatch(ctx, []string{"scan", "--allow-special", "--canaries", canaries, pipe}, strings.NewReader(""), &stdout, &stderr, noEnv)
	w := <-writer
	require.NotNil(t, w)
	require.NoError(t, w.Close())
	require.Equal(t, 2, code, stderr.String())
	require.Contains(t, stderr.String(), "terminated: stopping")
	require.Contains(t, stderr.String(), "not scanned: "+pipe)
}
