package cli_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A plugin installed in a served profile's home after its plugins were
// first looked for is found only after SIGHUP, which also ends the hosts
// it replaces: how an operator installs a plugin on a running staging
// server (remote.reload).
func TestServeSIGHUPReloadsPlugins(t *testing.T) {
	t.Parallel()
	w, alpha, _ := alphaBetaWorld(t)
	srv := toolThenText(t, alpha.key, "plugin probed", func(prompt any) (string, any) {
		return "plugin_probe", map[string]any{"tag": prompt}
	})
	writeFile(t, filepath.Join(alpha.home, "config.yaml"), fmt.Sprintf(
		"model:\n  base_url: %s\n  default: %s\n  key_env: TENANT_PROVIDER_KEY\nterminal:\n  cwd: %s\n",
		srv.BaseURL, alpha.model, alpha.workdir))
	setIsolation(t, w, "host")
	s := w.startServe(nil)
	ca := s.dial()
	sid, _ := ca.create("")

	last := func() string { r := toolResults(srv); return r[len(r)-1] }
	ca.turn(sid, "before")
	require.Contains(t, last(), "unknown tool", "no plugin yet: the profile's plugins were looked for")
	installPlugin(t, "probe", probePlugin, alpha)
	ca.turn(sid, "installed")
	require.Contains(t, last(), "unknown tool", "control: without a reload the server keeps what it found")

	hup := func(n int) {
		t.Helper()
		require.NoError(t, syscall.Kill(s.pid, syscall.SIGHUP))
		require.Eventually(t, func() bool { return strings.Count(s.stderr.String(), "plugins reloaded (SIGHUP)") >= n },
			30*time.Second, 10*time.Millisecond, "agentd never logged the reload:\n%s", s.stderr.String())
	}
	hup(1)
	ca.turn(sid, "reloaded")
	first := probeOf(t, srv)
	require.Equal(t, "reloaded", first.State, "after SIGHUP the plugin's tool runs")
	require.NotEqual(t, s.pid, first.Pid, "in a host of its own")
	before := tenantProcs(alpha)

	// The next reload ends that host (its processes go) and the next turn
	// starts another.
	hup(2)
	require.Eventually(t, func() bool { return len(gone(before, tenantProcs(alpha))) > 0 }, 30*time.Second, 10*time.Millisecond,
		"the reload ended no process of the host it replaced (alpha's: %v)", before)
	ca.turn(sid, "again")
	require.Equal(t, "again", probeOf(t, srv).State)
	require.NotEmpty(t, gone(tenantProcs(alpha), before), "a new host after the reload")
	s.stop()
}

// gone is what of a is not in b.
func gone(a, b []int) []int {
	var out []int
	for _, p := range a {
		if !slices.Contains(b, p) {
			out = append(out, p)
		}
	}
	return out
}
