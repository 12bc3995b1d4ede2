package invariants

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/tenants"
)

func probeOutput(marker, cwd string, extra ...string) string {
	lines := append([]string{tenants.ProbeBegin, "HOME=/sandbox/home", "TENANT_MARKER=" + marker}, extra...)
	if cwd != "" {
		lines = append(lines, "CWD="+cwd)
	}
	return strings.Join(append(lines, tenants.ProbeEnd), "\n") + "\n"
}

func toolTurn(id, output string) []map[string]any {
	return []map[string]any{
		{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": id, "type": "function",
			"function": map[string]any{"name": "terminal", "arguments": `{"command":"env"}`}}}},
		{"role": "tool", "tool_call_id": id, "content": output},
	}
}

func TestSnapshots(t *testing.T) {
	t.Parallel()
	s := newSet(t)
	def, alpha, beta := s.Get("default"), s.Get("alpha"), s.Get("beta")

	// alpha: a clean snapshot, re-sent with the next turn (one snapshot).
	clean := toolTurn("call_a1", probeOutput(alpha.Value(tenants.EnvMarker), alpha.Workdir, "CANARY="+alpha.Value(tenants.EnvName)))
	post(t, alpha, alpha.ProviderKey(), chat(alpha.Model(), append([]map[string]any{user("run it")}, clean...)...))
	post(t, alpha, alpha.ProviderKey(), chat(alpha.Model(), append(append([]map[string]any{user("run it")}, clean...), user("again"))...))

	// beta: its cron conversation, the output JSON-escaped once more, the
	// probe ran in alpha's workdir and shows alpha's shell state.
	leaky := probeOutput(beta.Value(tenants.EnvMarker), alpha.Workdir, "TENANT_SHELL_STATE="+alpha.Value(tenants.ShellState))
	escaped := strings.ReplaceAll(leaky, "\n", `\n`)
	post(t, beta, beta.ProviderKey(), chat(beta.Model(), append([]map[string]any{user(beta.CronPromptText())}, toolTurn("call_b1", escaped)...)...))

	// default: an Anthropic tool_result with no CWD line and no marker.
	postTo(t, def, "/messages", def.ProviderKey(), map[string]any{"model": def.Model(), "max_tokens": 100,
		"tools": []any{map[string]any{"name": "terminal", "input_schema": map[string]any{"type": "object"}}},
		"messages": []any{
			user("run it"),
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "toolu_1", "name": "terminal", "input": map[string]any{}}}},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "toolu_1",
				"content": []any{map[string]any{"type": "text", "text": tenants.ProbeBegin + "\nPATH=/bin\n" + tenants.ProbeEnd}}}}},
		}})
	waitRequests(t, alpha, 2)
	waitRequests(t, beta, 1)
	waitRequests(t, def, 1)

	snaps := EnvSnapshots(alpha, alpha.Provider.Requests())
	require.Len(t, snaps, 1)
	require.Equal(t, EnvSnapshot{Tenant: "alpha", Origin: OriginTurn, ToolCall: "call_a1", Request: 0,
		Text: probeOutput(alpha.Value(tenants.EnvMarker), alpha.Workdir, "CANARY="+alpha.Value(tenants.EnvName))}, snaps[0])
	bs := EnvSnapshots(beta, beta.Provider.Requests())
	require.Len(t, bs, 1)
	require.Equal(t, OriginCron, bs[0].Origin)
	require.Equal(t, leaky, bs[0].Text, "unescaped")

	got := SnapshotLeaks(s.Tenants)
	require.Equal(t, []string{
		"env_snapshot default / ",
		"env_snapshot beta alpha/workdir ",
		"env_snapshot beta alpha/shell_state raw",
		"env_snapshot beta alpha/workdir raw",
	}, findingKeys(got), Format(got))
	require.Contains(t, got[0].String(), "no CWD= line")
	require.Contains(t, got[1].String(), "env_snapshot: beta request #0 cron job tool call call_b1: carries alpha's workdir: the probe ran in")

	ctl := ControlSnapshots(s.Tenants)
	require.Equal(t, []string{"control default / "}, findingKeys(ctl), Format(ctl))
	require.Equal(t, "toolu_1", ctl[0].Where.ToolCall)

	require.Empty(t, SnapshotShortfall(s.Tenants, 1))
	short := SnapshotShortfall(s.Tenants, 2)
	require.Len(t, short, 3)
	require.Equal(t, "snapshot_shortfall: default: 1 env snapshot(s) reached its provider, want at least 2", short[0].String())
	require.False(t, short[0].Invariant.Leak())
}

func TestUnescapeJSON(t *testing.T) {
	t.Parallel()
	require.Equal(t, "a\nb\t\"c\"/é\\", unescapeJSON(`a\nb\t\"c\"\/\u00e9\\`))
	require.Equal(t, "real\nnewline \\n kept", unescapeJSON("real\nnewline \\n kept"))
	require.Equal(t, "no escapes", unescapeJSON("no escapes"))
}
