package invariants

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// turn posts messages to tn's provider and returns the decoded reply.
func turn(t *testing.T, tn *tenants.Tenant, msgs []map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(chat(tn.Model(), msgs...))
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, tn.Provider.BaseURL+"/chat/completions", bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tn.ProviderKey())
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var out struct {
		Choices []struct {
			Message map[string]any `json:"message"`
		} `json:"choices"`
	}
	require.NoError(t, json.Unmarshal(body, &out))
	require.NotEmpty(t, out.Choices, string(body))
	return out.Choices[0].Message
}

// runProbe plays the agent: a user turn gets the probe tool call from the
// tenant's provider, the probe runs for real in a shell (cwd and the .env
// of the homes given, merged in order), and its output goes back as the
// tool result.
func runProbe(t *testing.T, s *tenants.Set, tn *tenants.Tenant, cwd string, envOf ...*tenants.Tenant) {
	t.Helper()
	msgs := []map[string]any{user("show me your environment")}
	reply := turn(t, tn, msgs)
	calls, _ := reply["tool_calls"].([]any)
	require.Len(t, calls, 1, "%v", reply)
	call := calls[0].(map[string]any)
	fn := call["function"].(map[string]any)
	var args struct {
		Command string `json:"command"`
	}
	require.NoError(t, json.Unmarshal([]byte(fn["arguments"].(string)), &args))
	require.Equal(t, tn.ProbeCommand(), args.Command)

	extra := map[string]string{}
	for _, o := range envOf {
		h, err := tenants.ReadHome(o.Home)
		require.NoError(t, err)
		for k, v := range h.Env {
			extra[k] = v
		}
	}
	env, err := s.Env(extra)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := procgroup.CommandContext(ctx, "sh", "-c", args.Command)
	cmd.Dir, cmd.Env = cwd, env
	out, err := cmd.Output()
	require.NoError(t, err)
	require.NoError(t, procgroup.Kill(cmd.Process.Pid))
	require.Empty(t, procgroup.GroupMembers(cmd.Process.Pid), "a probe process survived")

	msgs = append(msgs, reply, map[string]any{"role": "tool", "tool_call_id": call["id"], "content": string(out)})
	done := turn(t, tn, msgs)
	require.Equal(t, "probe done for "+tn.Name+" ["+tn.Value(tenants.Reply)+"]", done["content"])
}

// TestProbeRoundTrip runs the real env probe: a tenant's own environment
// passes every snapshot check and control; a probe that ran in another
// tenant's workdir with that tenant's .env is caught, and fails the
// tenant's own control.
func TestProbeRoundTrip(t *testing.T) {
	t.Parallel()
	s := newSet(t)
	def, alpha, beta := s.Get("default"), s.Get("alpha"), s.Get("beta")

	runProbe(t, s, alpha, alpha.Workdir, alpha)
	runProbe(t, s, def, def.Workdir, def)
	ts := []*tenants.Tenant{def, alpha}
	Assert(t, append(append(RequestLeaks(ts), SnapshotLeaks(ts)...), ControlSnapshots(ts)...))
	require.Empty(t, SnapshotShortfall(ts, 1))
	require.Empty(t, ControlKeys(ts))

	// beta's probe ran in alpha's workdir with alpha's .env instead of its own.
	runProbe(t, s, beta, alpha.Workdir, alpha)
	got := SnapshotLeaks(s.Tenants)
	want := []string{"env_snapshot beta alpha/workdir "}
	for _, k := range []tenants.Kind{tenants.ProviderKey, tenants.APIServerKey, tenants.EnvMarker, tenants.Workdir, tenants.EnvName} {
		want = append(want, "env_snapshot beta alpha/"+string(k)+" raw")
	}
	require.ElementsMatch(t, want, findingKeys(got), Format(got))
	// Its own marker is missing: the control says so, apart from the leak.
	ctl := ControlSnapshots(s.Tenants)
	require.Equal(t, []string{"control beta / "}, findingKeys(ctl), Format(ctl))
}
