package cli_test

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
)

func TestFaultsAreRefusedWithoutAllow(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.addTenant("alpha", true)
	w.extraEnv = []string{"AGENTD_FAULTS=shared-shell"}
	_, stderr, code := w.run("tui")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "AGENTD_ALLOW_FAULTS=1")
	w.extraEnv = []string{"AGENTD_FAULTS=no-such-fault", "AGENTD_ALLOW_FAULTS=1"}
	_, stderr, code = w.run("cron", "tick")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `unknown fault "no-such-fault"`)
}

// faultWorld is alpha (launch) and beta, with a variable only alpha has.
func faultWorld(t *testing.T, fault string) (*world, *tenant, *tenant, []string) {
	w, alpha, beta := alphaBetaWorld(t)
	f, err := os.OpenFile(filepath.Join(alpha.home, ".env"), os.O_APPEND|os.O_WRONLY, 0o600)
	require.NoError(t, err)
	_, err = f.WriteString("ONLY_ALPHA=" + alpha.marker + "\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	env := []string{"AGENTD_FAULTS=" + fault, "AGENTD_ALLOW_FAULTS=1"}
	w.extraEnv = env
	return w, alpha, beta, env
}

func lastSnapshot(t *testing.T, tn *tenant) (map[string]string, string) {
	t.Helper()
	results := toolResults(tn.srv)
	require.NotEmpty(t, results, tn.name)
	env, cwd, _ := snapshot(t, results[len(results)-1])
	return env, cwd
}

// TestSeededFaultsLeak proves each seeded fault really leaks (the clean
// behaviour is what every other test in this package asserts).
func TestSeededFaultsLeak(t *testing.T) {
	t.Parallel()
	cases := map[string]func(t *testing.T, w *world, alpha, beta *tenant, env []string){
		"dotenv-into-process": func(t *testing.T, w *world, alpha, beta *tenant, env []string) {
			d := w.startTUI(env...)
			d.probeIn("")
			d.probeIn("beta")
			got, _ := lastSnapshot(t, beta)
			require.Equal(t, alpha.marker, got["ONLY_ALPHA"])
			require.Contains(t, d.stderr.String(), "SEEDED ISOLATION FAULTS ARE ON", "logged loudly")
			d.close()
		},
		"launch-env-bleed": func(t *testing.T, w *world, alpha, beta *tenant, env []string) {
			d := w.startTUI(env...)
			d.probeIn("beta")
			got, _ := lastSnapshot(t, beta)
			require.Equal(t, alpha.marker, got["ONLY_ALPHA"])
			require.Equal(t, beta.key, got["TENANT_PROVIDER_KEY"], "the profile's own value still wins a shared name")
			d.close()
		},
		"shared-shell": func(t *testing.T, w *world, alpha, beta *tenant, env []string) {
			d := w.startTUI(env...)
			d.probeIn("")
			d.probeIn("beta")
			got, cwd := lastSnapshot(t, beta)
			require.Equal(t, alpha.workdir, cwd)
			require.Equal(t, alpha.shellState, got["TENANT_SHELL_STATE"])
			d.close()
		},
		"global-cwd": func(t *testing.T, w *world, alpha, beta *tenant, env []string) {
			d := w.startTUI(env...)
			moved := filepath.Join(w.root, "alpha-moved")
			require.NoError(t, os.Mkdir(moved, 0o700))
			d.ok("config.set", map[string]any{"key": "cwd", "value": moved, "profile": "default"})
			d.probeIn("beta")
			_, cwd := lastSnapshot(t, beta)
			require.Equal(t, moved, cwd)
			d.close()
		},
		"cron-launch-scope": func(t *testing.T, w *world, alpha, beta *tenant, env []string) {
			out, stderr, code := w.run("cron", "create", "--profile", "beta", "--name", "b", "--prompt", "cron-canary-beta", "--every", "1h")
			require.Equal(t, 0, code, stderr)
			_, stderr, code = w.run("cron", "trigger", "--profile", "beta", strings.TrimSpace(out))
			require.Equal(t, 0, code, stderr)
			_, stderr, code = w.run("cron", "tick")
			require.Equal(t, 0, code, stderr)
			require.Contains(t, string(alpha.srv.Requests()[0].RawBody), "cron-canary-beta")
			require.Empty(t, beta.srv.Requests())
		},
		"shared-credential": func(t *testing.T, w *world, alpha, beta *tenant, env []string) {
			d := w.startTUI(env...)
			d.probeIn("")
			sb, _ := d.create("beta")
			require.Equal(t, "error", d.turn(sb, "probe")["status"])
			require.Equal(t, alpha.key, beta.srv.Requests()[0].Auth)
			d.close()
		},
		"model-bleed": func(t *testing.T, w *world, alpha, beta *tenant, env []string) {
			d := w.startTUI(env...)
			sb, res := d.create("beta")
			require.Equal(t, alpha.model, res["info"].(map[string]any)["model"])
			d.turn(sb, "probe")
			require.Equal(t, alpha.model, beta.srv.RequestsOf(fakellm.KindMain)[0].Model())
			d.close()
		},
		"wrong-write-scope": func(t *testing.T, w *world, alpha, beta *tenant, env []string) {
			d := w.startTUI(env...)
			d.ok("config.set", map[string]any{"key": "prompt", "value": "written-for-beta", "profile": "beta"})
			require.Contains(t, string(mustRead(t, filepath.Join(alpha.home, "config.yaml"))), "written-for-beta")
			require.NotContains(t, string(mustRead(t, filepath.Join(beta.home, "config.yaml"))), "written-for-beta")
			d.close()
		},
		"broadcast-events": func(t *testing.T, w *world, alpha, beta *tenant, env []string) {
			s := w.startServe(nil, env...)
			ca, cb := s.dial(), s.dial()
			sa, _ := ca.create("")
			cb.create("beta")
			ca.turn(sa, "probe")
			cb.waitComplete(sa, 1)
			require.Contains(t, strings.Join(cb.raw, "\n"), alpha.marker, "beta's connection got alpha's turn")
			s.stop()
		},
		"shared-state-db": func(t *testing.T, w *world, alpha, beta *tenant, env []string) {
			d := w.startTUI(env...)
			sb, res := d.create("beta")
			d.turn(sb, "probe")
			d.close()
			msgs := storedMessages(t, alpha.home, res)
			require.NotEmpty(t, msgs)
			require.Contains(t, msgs[2].Content, beta.marker)
		},
		"log-secret-encoded": func(t *testing.T, w *world, alpha, beta *tenant, env []string) {
			d := w.startTUI(env...)
			d.probeIn("beta")
			d.close()
			require.Contains(t, d.stderr.String(), base64.StdEncoding.EncodeToString([]byte(beta.key)))
		},
	}
	for fault, run := range cases {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			w, alpha, beta, env := faultWorld(t, fault)
			run(t, w, alpha, beta, env)
		})
	}
}
