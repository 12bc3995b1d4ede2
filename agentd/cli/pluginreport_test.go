package cli_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
)

// A memory provider without Prefetch: it does not satisfy
// plugin.MemoryProvider, so the plugin does not load.
const misfitPlugin = `package misfit

import (
	"context"

	"github.com/tenantcanary/tenantcanary/plugin"
)

type mem struct{}

func (mem) Name() string                                    { return "misfit" }
func (mem) IsAvailable(ctx context.Context) bool            { return true }
func (mem) Initialize(ctx context.Context, s string) error  { return nil }
func (mem) SyncTurn(ctx context.Context, u, a string) error { return nil }

func Register(ctx plugin.Context) error {
	if err := ctx.RegisterTool(plugin.Tool{Name: "misfit_tool", Handler: func(map[string]any) (string, error) { return "ran", nil }}); err != nil {
		return err
	}
	return ctx.RegisterMemoryProvider(mem{})
}
`

// A plugin that does not compile.
const brokenPlugin = `package broken

import "github.com/tenantcanary/tenantcanary/plugin"

func Register(ctx plugin.Context) error {
	return ctx.RegisterTool(plugin.Tool{Name: "broken_tool", Handler: undefinedHandler})
}
`

// A plugin that loads: the positive control (its tool runs, and it is
// never reported).
const finePlugin = `package fine

import "github.com/tenantcanary/tenantcanary/plugin"

func Register(ctx plugin.Context) error {
	return ctx.RegisterTool(plugin.Tool{Name: "fine_tool", Handler: func(map[string]any) (string, error) { return "fine ran", nil }})
}
`

// errorEvents returns the messages of a session's error events.
func errorEvents(a *agentd, sid string) []string {
	var out []string
	for _, e := range a.events(sid) {
		if e["type"] == "error" {
			p, _ := e["payload"].(map[string]any)
			m, _ := p["message"].(string)
			out = append(out, m)
		}
	}
	return out
}

// A plugin that does not compile, or whose provider does not satisfy the
// SDK's interface, is reported to the tenant over its own connection
// (pooled serve; in a host and in-process): an error event when a
// session starts, and a tool result plus an error event when the model
// calls the tool it would have offered. Another tenant hears nothing of it.
func TestPluginThatDidNotLoadIsReportedToTheTenant(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"host", "in_process"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			pluginFailureReported(t, mode)
		})
	}
}

func pluginFailureReported(t *testing.T, mode string) {
	w, alpha, beta := alphaBetaWorld(t)
	installPlugin(t, "misfit", misfitPlugin, alpha)
	installPlugin(t, "broken", brokenPlugin, alpha)
	installPlugin(t, "fine", finePlugin, alpha, beta)
	w.writeManaged("plugins:\n  isolation: " + mode + "\n  host:\n    launcher: env\n")
	s := w.startServe(nil)
	ca, cb := s.dial(), s.dial()

	// session.create: one error event per plugin that did not load, sent
	// before the reply.
	sa, _ := ca.create("")
	got := errorEvents(ca, sa)
	require.Len(t, got, 2, "error events of the session: %q", got)
	joined := strings.Join(got, "\n")
	require.Contains(t, joined, "plugin broken of profile default did not load")
	require.Contains(t, joined, "undefinedHandler", "the compile error is not said")
	require.Contains(t, joined, "plugin misfit of profile default did not load")
	require.Contains(t, joined, "cannot use", "the unsatisfied interface is not said")
	require.NotContains(t, joined, "plugin fine", "a plugin that loaded was reported")

	// Positive control: beta's plugin loaded, and beta hears nothing of
	// alpha's.
	sb, _ := cb.create("beta")
	require.Empty(t, errorEvents(cb, sb), "beta's session was told of a failure")
	cb.mu.Lock()
	raws := append([]string(nil), cb.raw...)
	cb.mu.Unlock()
	for _, raw := range raws {
		require.NotContains(t, raw, "misfit", "beta's connection carried alpha's plugin failure")
	}

	// The model calls the tool the misfit plugin would have offered: the
	// result says why it is not there, and so does an error event.
	alpha.srv.Enqueue(fakellm.ToolCall("misfit_tool", map[string]any{}), fakellm.Text("told"))
	done := ca.turn(sa, "use misfit_tool")
	require.Equal(t, "complete", done["status"])
	var result string
	for _, e := range ca.events(sa) {
		if e["type"] == "tool.complete" {
			p, _ := e["payload"].(map[string]any)
			if p["name"] == "misfit_tool" {
				result, _ = p["result"].(string)
			}
		}
	}
	require.Contains(t, result, `unknown tool "misfit_tool"`)
	require.Contains(t, result, "plugin misfit of profile default did not load")
	require.Len(t, errorEvents(ca, sa), 4, "the tool call sent no error events")
	sent := strings.Join(toolResults(alpha.srv), "\n")
	require.Contains(t, sent, "plugin misfit of profile default did not load", "the model was not told")

	// The plugin that loaded still works beside them.
	alpha.srv.Enqueue(fakellm.ToolCall("fine_tool", map[string]any{}), fakellm.Text("ok"))
	require.Equal(t, "complete", ca.turn(sa, "use fine_tool")["status"])
	require.Contains(t, toolResults(alpha.srv), "fine ran")
	s.stop()
}
