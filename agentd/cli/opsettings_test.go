package cli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAProfilesOwnOperatorKeysAreIgnored: a tenant appends what only the
// operator may set to its own config.yaml (issue 21's attack): a launcher
// of its own, a call timeout, plugins.isolation: in_process, an unsandboxed
// terminal, the network, workdir roots. In pooled serving each is ignored
// with a log line naming the profile, file and key, and the default
// applies: the tenant's launcher never runs, its plugin runs in a host,
// its call timeout does not bind. With the tenant-operator-settings fault
// the launcher runs and the plugin runs inside the server (the positive
// control).
func TestAProfilesOwnOperatorKeysAreIgnored(t *testing.T) {
	t.Parallel()
	defendedAndSeeded(t, "tenant-operator-settings", func(t *testing.T, fault bool, env []string) {
		w, _, beta := alphaBetaWorld(t)
		gamma := w.addTenant("gamma", false)
		srvB := pluginTenant(t, beta, "host")
		srvG := pluginTenant(t, gamma, "host")
		launched := filepath.Join(w.root, "launched-by-beta")
		writeFile(t, filepath.Join(beta.home, "l.sh"), ": > "+launched+"\nexec \"$@\"\n")
		writeFile(t, filepath.Join(beta.home, "config.yaml"), fmt.Sprintf(
			"model:\n  base_url: %s\n  default: %s\n  key_env: TENANT_PROVIDER_KEY\nterminal:\n  cwd: %s\n  sandbox: none\n  network: host\n  workdir_roots: [/]\n"+
				"plugins:\n  host:\n    launcher: [/bin/sh, %s]\n    call_timeout: 1ms\n",
			srvB.BaseURL, beta.model, beta.workdir, filepath.Join(beta.home, "l.sh")))
		writeFile(t, filepath.Join(gamma.home, "config.yaml"), fmt.Sprintf(
			"model:\n  base_url: %s\n  default: %s\n  key_env: TENANT_PROVIDER_KEY\nterminal:\n  cwd: %s\nplugins:\n  isolation: in_process\n",
			srvG.BaseURL, gamma.model, gamma.workdir))
		s := w.startServe(nil, env...)
		cb, cg := s.dial(), s.dial()
		sb, _ := cb.create("beta")
		sg, _ := cg.create("gamma")
		cb.turn(sb, "probe")
		cg.turn(sg, "probe")
		pg := probeOf(t, srvG)
		if fault {
			require.FileExists(t, launched, "positive control: with the fault the tenant's own launcher runs")
			require.Equal(t, s.pid, pg.Pid, "positive control: with the fault gamma's plugin runs inside the server")
			s.stop()
			return
		}
		require.NoFileExists(t, launched, "beta's own launcher ran")
		pb := probeOf(t, srvB)
		require.NotEqual(t, s.pid, pb.Pid, "beta's plugin runs in a host")
		require.Equal(t, "NESTED-"+beta.marker+"\n"+beta.workdir+"\n", pb.Nested,
			"the plugin's call outlived beta's own call_timeout of 1ms: the default applies")
		require.NotEqual(t, s.pid, pg.Pid, "gamma's own plugins.isolation: in_process was ignored")
		log := s.stderr.String()
		for _, want := range []struct {
			tn  *tenant
			key string
		}{{beta, "plugins.host"}, {beta, "terminal.sandbox"}, {beta, "terminal.network"}, {beta, "terminal.workdir_roots"},
			{gamma, "plugins.isolation"}} {
			line := "profile=" + want.tn.name + " file=" + filepath.Join(want.tn.home, "config.yaml") + " key=" + want.key
			require.Equal(t, 1, strings.Count(log, line), "one log line for %s", line)
		}
		s.stop()
	})
}

// TestBadProfileNamesAndSlugsAreRefused: a profile name or a slug outside
// the allow-list is refused with a clear error wherever a call gives one
// (-32602 to create or delete it or as a slug, 4064 like any unknown
// profile to address it), and nothing is made.
func TestBadProfileNamesAndSlugsAreRefused(t *testing.T) {
	t.Parallel()
	w, alpha, _ := alphaBetaWorld(t)
	s, c := w.serveDialed()
	envBefore := string(mustRead(t, filepath.Join(alpha.home, ".env")))
	bad := []string{"../x", "a/b", ".deleted-x", "Beta", strings.Repeat("a", 65), ""}
	for _, name := range bad {
		for _, call := range []struct {
			method string
			params map[string]any
		}{
			{"profiles.create", map[string]any{"name": name}},
			{"profiles.delete", map[string]any{"name": name}},
			{"session.create", map[string]any{"profile": name}},
			{"config.set", map[string]any{"profile": name, "key": "prompt", "value": "x"}},
			{"cron.list", map[string]any{"profile": name}},
		} {
			if name == "" && call.method != "profiles.create" && call.method != "profiles.delete" {
				continue // no profile is the launch profile
			}
			r := c.call(call.method, call.params)
			e, _ := r["error"].(map[string]any)
			require.NotNil(t, e, "%s %q: want an error, got %v", call.method, name, r)
			want := float64(4064)
			if strings.HasPrefix(call.method, "profiles.") {
				want = -32602
			}
			require.Equal(t, want, e["code"], "%s %q: %v", call.method, name, e)
			if call.method != "profiles.delete" || name != "" {
				require.Contains(t, e["message"], "bad profile name", "%s %q", call.method, name)
			}
		}
		r := c.call("model.save_key", map[string]any{"slug": name, "api_key": "k-" + tag()})
		e, _ := r["error"].(map[string]any)
		require.NotNil(t, e, "slug %q: want an error", name)
		require.Equal(t, float64(-32602), e["code"], "slug %q", name)
		require.Contains(t, e["message"], "bad slug", "slug %q", name)
	}
	entries, err := os.ReadDir(filepath.Join(w.launch, "profiles"))
	require.NoError(t, err)
	require.Len(t, entries, 1, "only beta's home: %v", entries)
	require.Equal(t, envBefore, string(mustRead(t, filepath.Join(alpha.home, ".env"))), "no bad slug was saved")
	// Positive control: good ones pass.
	c.ok("model.save_key", map[string]any{"slug": "good_slug", "api_key": "k"})
	c.ok("profiles.create", map[string]any{"name": "ok-name_1"})
	s.stop()
}
