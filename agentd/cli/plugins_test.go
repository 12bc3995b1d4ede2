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
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

const probePlugin = `package probe

import (
	"context"
	"encoding/json"
	"os"

	"github.com/tenantcanary/tenantcanary/plugin"
)

func probe(pctx plugin.Context, c context.Context) (string, error) {
	marker := os.Getenv("ENV_MARKER")
	wd, _ := os.Getwd()
	pid := os.Getpid()
	nested, err := pctx.DispatchTool(c, "terminal", map[string]any{"command": "echo NESTED-$ENV_MARKER; pwd"})
	if err != nil {
		return "", err
	}
	err = pctx.State().Set(c, "k", "v-"+marker)
	if err != nil {
		return "", err
	}
	got, err := pctx.State().Get(c, "k")
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(map[string]any{"pid": pid, "marker": marker, "wd": wd, "nested": nested, "state": got})
	return string(b), err
}

func Register(pctx plugin.Context) error {
	return pctx.RegisterTool(plugin.Tool{Name: "plugin_probe", Toolset: "probe", Description: "probe where the plugin runs",
		ContextHandler: func(c context.Context, args map[string]any) (string, error) {
			return probe(pctx, c)
		}})
}
`

type probeResult struct {
	Pid    int    `json:"pid"`
	Marker string `json:"marker"`
	Wd     string `json:"wd"`
	Nested string `json:"nested"`
	State  string `json:"state"`
}

// pluginTenant gives tn a probe plugin and a provider that calls it.
func pluginTenant(t *testing.T, tn *tenant, isolation string) *fakellm.Server {
	t.Helper()
	dir := filepath.Join(tn.home, "plugins", "probe")
	writeFile(t, filepath.Join(dir, "plugin.yaml"), "name: probe\nversion: \"1.0\"\n")
	writeFile(t, filepath.Join(dir, "plugin.go"), probePlugin)
	srv, err := fakellm.New(fakellm.Options{Keys: []string{tn.key}, Responder: func(r fakellm.Record) fakellm.Response {
		msgs := r.Messages()
		if msgs[len(msgs)-1]["role"] == "tool" {
			return fakellm.Text("plugin probed")
		}
		return fakellm.ToolCall("plugin_probe", map[string]any{})
	}})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	writeFile(t, filepath.Join(tn.home, "config.yaml"), fmt.Sprintf(
		"model:\n  base_url: %s\n  default: %s\n  key_env: TENANT_PROVIDER_KEY\nterminal:\n  cwd: %s\nplugins:\n  isolation: %s\n",
		srv.BaseURL, tn.model, tn.workdir, isolation))
	return srv
}

func probeOf(t *testing.T, srv *fakellm.Server) probeResult {
	t.Helper()
	results := toolResults(srv)
	require.Len(t, results, 1)
	var p probeResult
	require.NoError(t, json.Unmarshal([]byte(results[0]), &p), results[0])
	return p
}

func TestPluginsPerProfileHostAndInProcess(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	alpha := w.addTenant("alpha", true)
	beta := w.addTenant("beta", false)
	t.Cleanup(func() {
		if t.Failed() {
			for _, tn := range []*tenant{alpha, beta} {
				b, _ := os.ReadFile(filepath.Join(tn.home, "logs", "agent.log"))
				t.Logf("%s agent.log:\n%s", tn.name, b)
			}
		}
	})
	srvA := pluginTenant(t, alpha, "host")
	srvB := pluginTenant(t, beta, "in_process")
	s := w.startServe(nil)
	ca, cb := s.dial(), s.dial()
	sa, _ := ca.create("")
	sb, _ := cb.create("beta")
	ca.submit(sa, "probe")
	cb.submit(sb, "probe")
	require.Equal(t, "complete", ca.waitComplete(sa, 1)["status"])
	require.Equal(t, "complete", cb.waitComplete(sb, 1)["status"])

	pa, pb := probeOf(t, srvA), probeOf(t, srvB)
	// Host mode: another process, in the profile's home, with its env.
	require.NotEqual(t, s.pid, pa.Pid, "alpha's plugin ran out of the server")
	require.Equal(t, alpha.home, pa.Wd)
	require.Equal(t, alpha.marker, pa.Marker)
	// In-process mode: the server's own process.
	require.Equal(t, s.pid, pb.Pid, "beta's plugin ran in the server")
	// Either way, the nested call ran as the calling session: its shell, cwd and env.
	require.Equal(t, "NESTED-"+alpha.marker+"\n"+alpha.workdir+"\n", pa.Nested)
	require.Equal(t, "NESTED-"+beta.marker+"\n"+beta.workdir+"\n", pb.Nested)
	require.Equal(t, "v-"+alpha.marker, pa.State)
	for _, r := range []string{toolResults(srvA)[0]} {
		require.NotContains(t, r, beta.marker)
	}
	require.NotContains(t, toolResults(srvB)[0], alpha.marker)
	s.stop()
	require.Eventually(t, func() bool { return !procgroup.Alive(pa.Pid) }, 10*time.Second, 10*time.Millisecond,
		"the plugin host %d ended with the server", pa.Pid)
}
