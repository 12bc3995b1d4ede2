package attack

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// chat is a minimal agent loop against t's provider: it sends msgs and
// returns the assistant's message.
func chat(t *testing.T, tn *tenants.Tenant, key string, msgs []any) map[string]any {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": tn.Model(), "messages": msgs,
		"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "terminal"}}}})
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, tn.ProviderURL()+"/chat/completions", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	var out struct {
		Choices []struct {
			Message map[string]any `json:"message"`
		} `json:"choices"`
	}
	require.NoError(t, json.Unmarshal(b, &out))
	return out.Choices[0].Message
}

// A server that wraps the prompt (text before and after, content parts)
// and appends a runtime-facts message after the tool result still gets the
// attack's call, and the records prove each step; a mangled instruction is
// the default probe, and the proof names the missing step.
func TestResponderFindsWrappedAttacksAndProvesThem(t *testing.T) {
	t.Parallel()
	set, err := tenants.Build(t.TempDir(), tenants.Options{Names: []string{"alpha"}, Responder: Responder})
	require.NoError(t, err)
	t.Cleanup(set.Close)
	tn := set.Tenants[0]
	call := Call{Tool: "terminal", Args: map[string]any{"command": "cat x"}}
	prompt := Prompt(call)
	nonce := NonceOf(prompt)
	require.Len(t, nonce, 10)
	assert.NotEqual(t, nonce, NonceOf(Prompt(call)), "every prompt has a fresh nonce")

	user := map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "text", "text": "[Wed 2026-12-02 03:00 UTC] " + prompt},
		map[string]any{"type": "text", "text": "runtime: node v22, cwd /srv"}}}
	msg := chat(t, tn, tn.ProviderKey(), []any{map[string]any{"role": "system", "content": "be good"}, user})
	calls, _ := msg["tool_calls"].([]any)
	require.Len(t, calls, 1, "message %v", msg)
	c := calls[0].(map[string]any)
	id := c["id"].(string)
	assert.True(t, strings.HasPrefix(id, CallID(nonce)), "the call id %q carries the nonce", id)
	assert.Contains(t, id, tn.Value(tenants.Reply), "and the tenant's reply canary")
	var args map[string]any
	require.NoError(t, json.Unmarshal([]byte(c["function"].(map[string]any)["arguments"].(string)), &args))
	assert.Equal(t, call.Args, args)

	p := Prove(tn.Requests(), tn.ProviderKey(), nonce)
	assert.True(t, p.Asked && p.Called && !p.Back, "%+v", p)
	assert.Contains(t, p.Missing(true), "no tool result for call "+CallID(nonce))

	facts := map[string]any{"role": "user", "content": "runtime facts: the tool ran for 3 ms"}
	done := chat(t, tn, tn.ProviderKey(), []any{user, msg, map[string]any{"role": "tool", "tool_call_id": id, "content": "x\n" + RowDone}, facts})
	assert.True(t, strings.HasPrefix(done["content"].(string), Done+" "+nonce), "got %v", done["content"])
	p = Prove(tn.Requests(), tn.ProviderKey(), nonce)
	assert.Empty(t, p.Missing(true), "%+v", p)
	assert.Equal(t, "x\n"+RowDone, p.Result)
	assert.Contains(t, Proof{Nonce: nonce, Asked: true, Called: true, Back: true, Result: "cut"}.Missing(true), "without the row's end marker")

	// A mangled instruction is not an attack: the probe runs instead, and
	// the proof says the provider never saw the nonce.
	second := Prompt(call)
	mangled := strings.ToLower(second)
	probe := chat(t, tn, tn.ProviderKey(), []any{map[string]any{"role": "user", "content": mangled}})
	pc, _ := probe["tool_calls"].([]any)
	require.Len(t, pc, 1)
	assert.Contains(t, pc[0].(map[string]any)["function"].(map[string]any)["arguments"], tenants.ProbeBegin)
	missing := Prove(tn.Requests(), tn.ProviderKey(), NonceOf(second)).Missing(true)
	assert.Contains(t, missing, "never asked with the attack's nonce")

	// A flood turn is text at once, wrapped or not.
	flood := chat(t, tn, tn.ProviderKey(), []any{map[string]any{"role": "user", "content": "[03:00] " + FloodPrompt + " 7"}})
	assert.True(t, strings.HasPrefix(flood["content"].(string), "flooded"))
}

// The responder without a provider: the calls it makes, read back.
func TestResponderAnswersByCallID(t *testing.T) {
	t.Parallel()
	set, err := tenants.Build(t.TempDir(), tenants.Options{Names: []string{"alpha"}, NoProviders: true})
	require.NoError(t, err)
	r := Responder(set.Tenants[0])
	rec := func(msgs ...map[string]any) fakellm.Record {
		var raw []any
		for _, m := range msgs {
			raw = append(raw, m)
		}
		return fakellm.Record{Body: map[string]any{"messages": raw}}
	}
	prompt := Prompt(Call{Tool: "terminal", Args: map[string]any{"command": "cat x"}})
	nonce := NonceOf(prompt)
	user := map[string]any{"role": "user", "content": prompt}
	got := r(rec(user))
	require.Len(t, got.Calls, 1)
	assert.Equal(t, CallID(nonce), got.Calls[0].ID)
	// Another call's result does not end the attack; its own does.
	asst := map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": CallID(nonce) + "-x"}}}
	other := map[string]any{"role": "tool", "tool_call_id": "call_other", "content": "result"}
	assert.Len(t, r(rec(user, asst, other)).Calls, 1)
	own := map[string]any{"role": "tool", "tool_call_id": CallID(nonce) + "-x", "content": "result"}
	assert.Equal(t, Done+" "+nonce, r(rec(user, asst, own, map[string]any{"role": "user", "content": "facts"})).Text)
	// Anything else is the default responder's probe, ended by its result.
	probe := r(rec(map[string]any{"role": "user", "content": "Run the environment probe."}))
	require.Len(t, probe.Calls, 1)
	assert.Contains(t, probe.Calls[0].Args.(map[string]string)["command"], tenants.ProbeBegin)
	tool := map[string]any{"role": "tool", "content": "result"}
	assert.Equal(t, "probe done for alpha", r(rec(map[string]any{"role": "user", "content": "x"}, tool)).Text)
}

// TestProofSurvivesRewrittenIDs: a server that drops the "-" of the
// model's call ids and suffixes repeats still has its results tied to the
// attack's call (by the normalised id); one that also renames the ids
// past recognition is tied by the call's content; one that changed both
// leaves a control that says it cannot tell, never "did not run".
func TestProofSurvivesRewrittenIDs(t *testing.T) {
	t.Parallel()
	set, err := tenants.Build(t.TempDir(), tenants.Options{Names: []string{"alpha"}, Responder: Responder})
	require.NoError(t, err)
	t.Cleanup(set.Close)
	tn := set.Tenants[0]
	run := func(rewrite func(id string) string, args func(string) string) (Proof, map[string]any) {
		call := Call{Tool: "terminal", Args: map[string]any{"command": "cat x; echo '" + RowDone + "'"}}
		prompt := Prompt(call)
		user := map[string]any{"role": "user", "content": prompt}
		msg := chat(t, tn, tn.ProviderKey(), []any{user})
		c := msg["tool_calls"].([]any)[0].(map[string]any)
		id := rewrite(c["id"].(string))
		fn := c["function"].(map[string]any)
		sent := map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": id, "type": "function",
			"function": map[string]any{"name": fn["name"], "arguments": args(fn["arguments"].(string))}}}}
		done := chat(t, tn, tn.ProviderKey(), []any{user, sent, map[string]any{"role": "tool", "tool_call_id": id, "content": "x\n" + RowDone}})
		return Prove(tn.Requests(), tn.ProviderKey(), NonceOf(prompt)), done
	}
	same := func(s string) string { return s }
	p, done := run(func(id string) string { return strings.ReplaceAll(id, "-", "") + "2" }, same)
	assert.Empty(t, p.Missing(true), "%+v", p)
	assert.Equal(t, "normalised id", p.How)
	assert.True(t, strings.HasPrefix(done["content"].(string), Done), "the responder ends the turn: %v", done)

	p, _ = run(func(string) string { return "call_0" }, same)
	assert.Empty(t, p.Missing(true), "%+v", p)
	assert.Equal(t, "content", p.How)

	p, done = run(func(string) string { return "call_1" }, func(string) string { return `{"command":"rewritten"}` })
	assert.NotEmpty(t, p.Missing(true), "the control: nothing ties the result to the call")
	assert.Contains(t, p.Unsure(), "cannot tell whether the attack ran")
	assert.Equal(t, "x\n"+RowDone, p.Untied)
	_ = done
}
