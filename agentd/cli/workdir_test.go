package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPooledWorkdirRule: in pooled serve, beta's config.set cwd to each
// place a hostile tenant pointed it at (alpha's workdir, the workdirs'
// parent, /proc, /sys, /dev/shm, /tmp, /var/tmp, /usr/local/bin, /, a
// symlink in its own workdir to alpha's, a link elsewhere to alpha's home)
// is refused with 4003 naming the rule, and its next shell still runs in
// its own workdir. An allowed workdir swapped for a symlink after
// config.set is caught when the sandbox binds it, and a terminal.cwd the
// tenant writes into its own config.yaml is judged the same; a link to its
// own workdir is run in by its real path. With the
// workdir-anywhere fault beta's shell runs in alpha's workdir (the
// positive control).
func TestPooledWorkdirRule(t *testing.T) {
	t.Parallel()
	needSandbox(t)
	for _, fault := range []string{"", "workdir-anywhere"} {
		t.Run("fault="+fault, func(t *testing.T) {
			t.Parallel()
			w, alpha, beta := alphaBetaWorld(t)
			cmdTenant(t, beta, "")
			secret := "alpha-workdir-secret-" + tag()
			writeFile(t, filepath.Join(alpha.workdir, "secret.txt"), secret+"\n")
			ownLink := filepath.Join(beta.workdir, "to-alpha")
			require.NoError(t, os.Symlink(alpha.workdir, ownLink))
			elsewhere := filepath.Join(t.TempDir(), "to-alpha-home") // a /var/tmp or /dev/shm stand-in
			require.NoError(t, os.Symlink(alpha.home, elsewhere))
			var env []string
			if fault != "" {
				env = []string{"AGENTD_FAULTS=" + fault, "AGENTD_ALLOW_FAULTS=1"}
			}
			s := w.startServe(nil, env...)
			c := s.dial()
			sb, _ := c.create("beta")
			const look = "pwd; cat secret.txt; true"

			if fault != "" {
				c.ok("config.set", map[string]any{"key": "cwd", "value": alpha.workdir, "session_id": sb})
				out := ranIn(t, c, beta, sb, look)
				require.Contains(t, out, secret, "positive control: beta's shell works in alpha's workdir:\n%s", out)
				c.ok("config.set", map[string]any{"key": "cwd", "value": ownLink, "session_id": sb})
				out = ranIn(t, c, beta, sb, look)
				require.Contains(t, out, secret, "positive control: through the link too:\n%s", out)
				s.stop()
				return
			}

			for _, p := range []struct{ cwd, rule string }{
				{alpha.workdir, "another profile's workdir root"},
				{filepath.Join(w.root, "work"), "holds every profile's workdir root"},
				{ownLink, "another profile's workdir root"},
				{elsewhere, "another profile's home (the launch profile's"},
				{"/proc", "system folder /proc"},
				{"/sys", "system folder /sys"},
				{"/dev/shm", "system folder /dev"},
				{"/tmp", "terminal.cwd /tmp"},
				{"/var/tmp", "terminal.cwd /var/tmp"},
				{"/usr/local/bin", "system folder /usr"},
				{"/", "terminal.cwd /"},
			} {
				if st, err := os.Stat(p.cwd); err != nil || !st.IsDir() {
					continue // not on this machine
				}
				r := c.call("config.set", map[string]any{"key": "cwd", "value": p.cwd, "session_id": sb})
				e, _ := r["error"].(map[string]any)
				require.NotNil(t, e, "config.set cwd %s was accepted", p.cwd)
				require.Equal(t, float64(4003), e["code"], "cwd %s: %v", p.cwd, e)
				require.Contains(t, e["message"], "workdir refused: ", p.cwd)
				require.Contains(t, e["message"], p.rule, p.cwd)
			}
			out := ranIn(t, c, beta, sb, look)
			require.True(t, strings.HasPrefix(out, beta.workdir+"\n"), "beta's next shell runs in its own workdir:\n%s", out)
			require.NotContains(t, out, secret)

			// A link outside every folder its sandbox binds, to its own
			// workdir: accepted, and the shell starts in the real path the
			// sandbox binds (the link itself is not there).
			toOwn := filepath.Join(t.TempDir(), "to-own")
			require.NoError(t, os.Symlink(beta.workdir, toOwn))
			c.ok("config.set", map[string]any{"key": "cwd", "value": toOwn, "session_id": sb})
			out = ranIn(t, c, beta, sb, "pwd")
			require.True(t, strings.HasPrefix(out, beta.workdir+"\n"), "beta's shell runs in its own workdir's real path:\n%s", out)

			// A folder of its own, accepted, then swapped for a link to alpha's.
			mine := filepath.Join(filepath.Dir(beta.workdir), "mine")
			require.NoError(t, os.Mkdir(mine, 0o700))
			c.ok("config.set", map[string]any{"key": "cwd", "value": mine, "session_id": sb})
			out = ranIn(t, c, beta, sb, "pwd")
			require.Contains(t, out, mine)
			require.NoError(t, os.Rename(mine, mine+".moved"))
			require.NoError(t, os.Symlink(alpha.workdir, mine))
			out = ranIn(t, c, beta, sb, look+"; echo planted > planted")
			require.Contains(t, out, "workdir refused", "the swap is caught when the sandbox binds it:\n%s", out)
			require.NotContains(t, out, secret)
			_, err := os.Stat(filepath.Join(alpha.workdir, "planted"))
			require.ErrorIs(t, err, os.ErrNotExist, "beta wrote into alpha's workdir")

			// The tenant writes alpha's workdir into its own config.yaml.
			cfg := filepath.Join(beta.home, "config.yaml")
			b := mustRead(t, cfg)
			writeFile(t, cfg, strings.Replace(string(b), "cwd: "+mine, "cwd: "+alpha.workdir, 1))
			require.Contains(t, string(mustRead(t, cfg)), "cwd: "+alpha.workdir)
			sb2, _ := c.create("beta")
			out = ranIn(t, c, beta, sb2, look)
			require.Contains(t, out, "workdir refused", "a cwd in its own config.yaml is judged too:\n%s", out)
			require.NotContains(t, out, secret)
			s.stop()
		})
	}
}
