package cli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
)

func TestPooledServeRunsUnconfiguredPluginsInAHost(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	alpha := w.addTenant("alpha", true)
	srv := pluginTenant(t, alpha, "") // plugins.isolation not set
	s := w.startServe(nil)
	c := s.dial()
	sid, _ := c.create("")
	c.turn(sid, "probe")
	p := probeOf(t, srv)
	require.NotEqual(t, s.pid, p.Pid, "an unconfigured profile's plugin ran in the pooled server")
	require.Equal(t, alpha.marker, p.Marker, "positive control: the probe ran, with the profile's environment")
	s.stop()
	log, err := os.ReadFile(filepath.Join(alpha.home, "logs", "agent.log"))
	require.NoError(t, err)
	require.Contains(t, string(log), "plugins: host mode")
	require.Contains(t, string(log), "pooled server runs third-party plugins in a host by default", "the log says why")
}

const crasherPlugin = `package crasher

import (
	"os"

	"github.com/tenantcanary/tenantcanary/plugin"
)

func Register(ctx plugin.Context) error {
	return ctx.RegisterTool(plugin.Tool{Name: "crash_now", Description: "ends its plugin host", Handler: func(args map[string]any) (string, error) {
		os.Exit(3)
		return "", nil
	}})
}
`

func TestASpentRestartBudgetIsAToolResultAndAnErrorEvent(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	alpha := w.addTenant("alpha", true)
	w.addTenant("beta", false)
	dir := filepath.Join(w.tenants["beta"].home, "plugins", "crasher")
	writeFile(t, filepath.Join(dir, "plugin.yaml"), "name: crasher\nversion: \"1.0\"\n")
	writeFile(t, filepath.Join(dir, "plugin.go"), crasherPlugin)
	beta := w.tenants["beta"]
	srv, err := fakellm.New(fakellm.Options{Keys: []string{beta.key}, Responder: func(r fakellm.Record) fakellm.Response {
		msgs := r.Messages()
		if msgs[len(msgs)-1]["role"] == "tool" {
			return fakellm.Text("crashed")
		}
		return fakellm.ToolCall("crash_now", nil)
	}})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	writeFile(t, filepath.Join(beta.home, "config.yaml"), fmt.Sprintf(
		"model:\n  base_url: %s\n  default: %s\n  key_env: TENANT_PROVIDER_KEY\nplugins:\n  host:\n    launcher: \"\"\n",
		srv.BaseURL, beta.model))
	_ = alpha

	s := w.startServe(nil)
	c := s.dial()
	sid, _ := c.create("beta")
	// Three deaths spend the budget (3 in 10 minutes).
	for i := range 3 {
		require.Equal(t, "complete", c.turn(sid, fmt.Sprintf("crash %d", i))["status"])
		require.Contains(t, toolResults(srv)[i], "exit status 3", "positive control: the plugin ended its host")
	}
	require.Equal(t, "complete", c.turn(sid, "once more")["status"])
	results := toolResults(srv)
	require.Len(t, results, 4)
	last := results[3]
	for _, want := range []string{"plugin crasher", "profile beta", "died 3 times", "restart budget exhausted", "exit status 3"} {
		require.Contains(t, last, want)
	}
	require.NotContains(t, last, "unknown tool")

	// The tool stayed offered to the model.
	reqs := srv.RequestsOf(fakellm.KindMain)
	lastReq := reqs[len(reqs)-1]
	require.Contains(t, string(lastReq.RawBody), `"crash_now"`, "the plugin's tool vanished from the tool list")

	var errEvents []string
	for _, e := range c.events(sid) {
		if e["type"] == "error" {
			p, _ := e["payload"].(map[string]any)
			errEvents = append(errEvents, fmt.Sprint(p["message"]))
		}
	}
	require.Len(t, errEvents, 1, "one error event, for the call the budget refused")
	for _, want := range []string{"plugin crasher", "profile beta", "died 3 times"} {
		require.True(t, strings.Contains(errEvents[0], want), "error event %q does not name %q", errEvents[0], want)
	}
	s.stop()
}
