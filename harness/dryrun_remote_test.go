package harness

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness/remote"
)

// target check on a running server tries every command of its remote:
// block, says which failed and why, and goes on to the others. The
// "server's host" is a folder here and its health a flag file the stop
// and start commands remove and make.
func TestDryRemoteTriesEveryCommandAndNamesTheOneThatFailed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	home, flag := filepath.Join(dir, "server-home"), filepath.Join(dir, "up")
	require.NoError(t, os.MkdirAll(filepath.Join(home, ".agentd"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(home, ".agentd", "SOUL.md"), []byte("soul"), 0o644))
	require.NoError(t, os.WriteFile(flag, nil, 0o644))
	// The server's own folders: one with two files, one missing.
	shared := filepath.Join(dir, "server-tmp")
	require.NoError(t, os.MkdirAll(shared, 0o755))
	for _, f := range []string{"a", "b"} {
		require.NoError(t, os.WriteFile(filepath.Join(shared, f), []byte(f), 0o644))
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := os.Stat(flag); err != nil || r.URL.Path != "/api/health" {
			http.Error(w, "down", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	tg := Target{Name: "staging", URL: srv.URL, Token: "tok", TenantsFile: filepath.Join(dir, "tenants.json"),
		Reach: &remote.Spec{Home: home,
			Pull:      []string{"sh", "-c", `tar -C "$0" -cf - .`, "{path}"},
			Push:      []string{"sh", "-c", `tar -C "$0" -xf -`, "{path}"},
			Stop:      []string{"rm", "-f", flag},
			Start:     []string{"touch", flag},
			Processes: []string{"sh", "-c", "echo not a listing; echo no such host >&2"},
			Reload:    []string{"true"},
			Exec:      []string{"sh", "-c", "{command}"},
			Shared:    []string{shared}}}
	// A second replica that answers, a third that is down.
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer up.Close()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	tg.ReplicaURLs = []string{up.URL, down.URL}
	require.NoError(t, tg.Validate())
	var out bytes.Buffer
	n := dryRemote(t.Context(), tg, dir, &DryReport{W: &out}, 3*time.Second)
	assert.Equal(t, 2, n, "%s", out.String())
	assert.Contains(t, out.String(), "ok    replica_urls[0]")
	assert.Contains(t, out.String(), "FAIL  replica_urls[1]")
	tg.ReplicaURLs = nil
	out.Reset()
	n = dryRemote(t.Context(), tg, dir, &DryReport{W: &out}, 30*time.Second)
	assert.Equal(t, 1, n, "%s", out.String())
	lines := out.String()
	for _, want := range []string{"ok    remote.pull", "1 file(s)", "ok    remote.push", "FAIL  remote.processes", "line 1",
		"ok    remote.stop", "ok    remote.start", "ok    remote.reload", "ok    remote.exec", "ok    remote.shared[0]", shared + ": 2 file(s)"} {
		assert.Contains(t, lines, want)
	}
	assert.FileExists(t, flag, "the server was started again")
	got, err := os.ReadFile(filepath.Join(home, ".agentd", "SOUL.md"))
	require.NoError(t, err)
	assert.Equal(t, "soul", string(got), "the push wrote nothing new")

	// A start that never brings the health URL up fails with what it
	// saw; an exec whose shell splits the command line fails saying so.
	tg.Reach.Start = []string{"true"}
	tg.Reach.Exec = []string{"sh", "-c", `eval "set -- $0"; sh -c "$@"`, "{command}"}
	out.Reset()
	n = dryRemote(t.Context(), tg, dir, &DryReport{W: &out}, 2*time.Second)
	assert.Equal(t, 3, n, "%s", out.String())
	assert.True(t, strings.Contains(out.String(), "FAIL  remote.exec") && strings.Contains(out.String(), "as one argument"), "%s", out.String())
	assert.True(t, strings.Contains(out.String(), "FAIL  remote.start") && strings.Contains(out.String(), "to answer 200"), "%s", out.String())
}
