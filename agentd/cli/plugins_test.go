package cli_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
)

const probePlugin = `package probe

import (
	"context"
	"encoding/json"
	"os"

	"github.com/tenantcanary/tenantcanary/plugin"
)

func probe(pctx plugin.Context, c context.Context, tag string) (string, error) {
	marker := os.Getenv("ENV_MARKER")
	wd, _ := os.Getwd()
	pid := os.Getpid()
	nested, err := pctx.DispatchTool(c, "terminal", map[string]any{"command": "echo NESTED-$ENV_MARKER; pwd"})
	if err != nil {
		return "", err
	}
	prev, err := pctx.State().Get(c, "k")
	if err != nil {
		return "", err
	}
	err = pctx.State().Set(c, "k", tag)
	if err != nil {
		return "", err
	}
	got, err := pctx.State().Get(c, "k")
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(map[string]any{"pid": pid, "marker": marker, "wd": wd, "nested": nested, "prev": prev, "state": got})
	return string(b), err
}

func Register(pctx plugin.Context) error {
	return pctx.RegisterTool(plugin.Tool{Name: "plugin_probe", Toolset: "probe", Description: "probe where the plugin runs",
		ContextHandler: func(c context.Context, args map[string]any) (string, error) {
			tag, _ := args["tag"].(string)
			return probe(pctx, c, tag)
		}})
}
`

type probeResult struct {
	Pid    int    `json:"pid"`
	Marker string `json:"marker"`
	Wd     string `json:"wd"`
	Nested string `json:"nested"`
	Prev   string `json:"prev"`
	State  string `json:"state"`
}

// pluginTenant gives tn a probe plugin and a provider that calls it. Its
// own config's plugins.isolation is ignored in pooled serving (only the
// operator's managed scope may set it: see setIsolation).
func pluginTenant(t *testing.T, tn *tenant, isolation string) *fakellm.Server {
	t.Helper()
	installPlugin(t, "probe", probePlugin, tn)
	srv := toolThenText(t, tn.key, "plugin probed", func(prompt any) (string, any) {
		return "plugin_probe", map[string]any{"tag": prompt}
	})
	writeFile(t, filepath.Join(tn.home, "config.yaml"), fmt.Sprintf(
		"model:\n  base_url: %s\n  default: %s\n  key_env: TENANT_PROVIDER_KEY\nterminal:\n  cwd: %s\nplugins:\n  isolation: %s\n",
		srv.BaseURL, tn.model, tn.workdir, isolation))
	return srv
}

func probeOf(t *testing.T, srv *fakellm.Server) probeResult {
	t.Helper()
	results := toolResults(srv)
	require.NotEmpty(t, results)
	var p probeResult
	last := results[len(results)-1]
	require.NoError(t, json.Unmarshal([]byte(last), &p), last)
	return p
}

// setIsolation pins plugins.isolation in w's managed (operator) scope.
func setIsolation(t *testing.T, w *world, mode string) {
	t.Helper()
	w.writeManaged("plugins:\n  isolation: " + mode + "\n")
}

func TestPluginsPerProfileHostAndInProcess(t *testing.T) {
	t.Parallel()
	w, alpha, beta := alphaBetaWorld(t)
	t.Cleanup(func() {
		if t.Failed() {
			for _, tn := range []*tenant{alpha, beta} {
				b, _ := os.ReadFile(filepath.Join(tn.home, "logs", "agent.log"))
				t.Logf("%s agent.log:\n%s", tn.name, b)
			}
		}
	})
	srvA := pluginTenant(t, alpha, "host")
	srvB := pluginTenant(t, beta, "in_process") // its own in_process is ignored: only the operator may set it
	setIsolation(t, w, "host")
	s, ca, cb, sa, sb := w.serveAlphaBeta()
	ca.submit(sa, "probe")
	cb.submit(sb, "probe")
	require.Equal(t, "complete", ca.waitComplete(sa, 1)["status"])
	require.Equal(t, "complete", cb.waitComplete(sb, 1)["status"])

	pa, pb := probeOf(t, srvA), probeOf(t, srvB)
	// Host mode: another process, in the profile's home, with its env.
	require.NotEqual(t, s.pid, pa.Pid, "alpha's plugin ran out of the server")
	require.Equal(t, alpha.home, pa.Wd)
	require.Equal(t, alpha.marker, pa.Marker)
	require.NotEqual(t, s.pid, pb.Pid, "beta's own plugins.isolation: in_process was ignored")
	require.Equal(t, beta.home, pb.Wd, "beta's plugin runs in a host of its own, in its home")
	require.Equal(t, beta.marker, pb.Marker)
	// The nested call ran as the calling session: its shell, cwd and env.
	require.Equal(t, "NESTED-"+alpha.marker+"\n"+alpha.workdir+"\n", pa.Nested)
	require.Equal(t, "NESTED-"+beta.marker+"\n"+beta.workdir+"\n", pb.Nested)
	require.Equal(t, "probe", pa.State, "the state facade is the session's")
	require.Empty(t, pa.Prev)
	require.NotContains(t, toolResults(srvA)[0], beta.marker)
	require.NotContains(t, toolResults(srvB)[0], alpha.marker)

	// A second session of alpha on another connection, served by the same
	// host: its nested calls and state are its own.
	cc := s.dial()
	sc2, _ := cc.create("")
	cc.turn(sc2, "second-session")
	p2 := probeOf(t, srvA)
	require.Equal(t, pa.Pid, p2.Pid, "one host per profile")
	require.Empty(t, p2.Prev, "a new session starts with empty state")
	require.Equal(t, "second-session", p2.State)
	require.NotEmpty(t, tenantProcs(alpha), "positive control: alpha's plugin host and shell run")
	s.stop()
	require.Eventually(t, func() bool { return len(tenantProcs(alpha)) == 0 }, 10*time.Second, 10*time.Millisecond,
		"alpha's plugin host (and shell) ended with the server")

	// In-process mode, as the operator pins it: the server's own process.
	setIsolation(t, w, "in_process")
	s = w.startServe(nil)
	cb = s.dial()
	sb, _ = cb.create("beta")
	cb.turn(sb, "probe")
	pb = probeOf(t, srvB)
	require.Equal(t, s.pid, pb.Pid, "beta's plugin ran in the server")
	require.Equal(t, "NESTED-"+beta.marker+"\n"+beta.workdir+"\n", pb.Nested)
	require.NotContains(t, toolResults(srvB)[len(toolResults(srvB))-1], alpha.marker)
	s.stop()
}

func TestPluginFaultsLeak(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fault string
		leak  func(t *testing.T, s *served, srv *fakellm.Server)
	}{
		{"plugin-in-process", func(t *testing.T, s *served, srv *fakellm.Server) {
			c := s.dial()
			sid, _ := c.create("")
			c.turn(sid, "probe")
			require.Equal(t, s.pid, probeOf(t, srv).Pid, "host mode ignored: the plugin ran in the server")
		}},
		{"context-lost", func(t *testing.T, s *served, srv *fakellm.Server) {
			ca, cb := s.dial(), s.dial()
			sa, _ := ca.create("")
			sb, _ := cb.create("")
			ca.turn(sa, "tag-of-session-a")
			require.Empty(t, probeOf(t, srv).Prev)
			cb.turn(sb, "tag-of-session-b")
			require.Equal(t, "tag-of-session-a", probeOf(t, srv).Prev, "b's nested call ran as a")
		}},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			srv := pluginTenant(t, w.addTenant("alpha", true), "host")
			s := w.startServe(nil, "AGENTD_FAULTS="+tc.fault, "AGENTD_ALLOW_FAULTS=1")
			tc.leak(t, s, srv)
			s.stop()
		})
	}
}
