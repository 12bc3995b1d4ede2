package fakellm_test

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
)

func record(msgs ...map[string]any) fakellm.Record {
	raw := make([]any, len(msgs))
	for i, m := range msgs {
		raw[i] = m
	}
	return fakellm.Record{Kind: fakellm.KindMain, Body: map[string]any{"messages": raw}}
}

// The latest turn is read through wrapped prompts, prompts in content
// parts, runtime-facts messages after a tool result, and Anthropic blocks.
func TestTurnFollowsTheConversation(t *testing.T) {
	t.Parallel()
	assistantCall := func(id string) map[string]any {
		return map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": id, "type": "function"}}}
	}
	r := record(
		map[string]any{"role": "user", "content": "old prompt"},
		assistantCall("c0"),
		map[string]any{"role": "tool", "tool_call_id": "c0", "content": "old result"},
		map[string]any{"role": "assistant", "content": "old answer"},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "[12:00] new"}, map[string]any{"type": "text", "text": "prompt"}}},
		assistantCall("c1"),
		map[string]any{"role": "tool", "tool_call_id": "c1", "content": []any{map[string]any{"type": "text", "text": "new result"}}},
		map[string]any{"role": "user", "content": "runtime facts: cwd=/x"},
	)
	turn := r.Turn()
	assert.Equal(t, "[12:00] new\nprompt\nruntime facts: cwd=/x", turn.Text)
	assert.Equal(t, []string{"c1"}, turn.Calls)
	assert.Equal(t, map[string]string{"c1": "new result"}, turn.Results, "the old turn's result is not this turn's")
	assert.Equal(t, 2, turn.Requests)
	assert.True(t, turn.Answered(), "a tool result followed by a user message is still an answer")
	res, ok := turn.Result("1")
	assert.True(t, ok)
	assert.Equal(t, "new result", res)
	assert.False(t, r.EndsWithToolResult(), "the old test sees no tool result at the end")

	anth := record(
		map[string]any{"role": "user", "content": "go"},
		map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "toolu_1"}}},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": "out"},
			map[string]any{"type": "text", "text": "facts"}}},
	).Turn()
	assert.Equal(t, "go\nfacts", anth.Text)
	assert.Equal(t, map[string]string{"toolu_1": "out"}, anth.Results)
	assert.True(t, anth.Answered())

	fresh := record(map[string]any{"role": "user", "content": "hi"}).Turn()
	assert.False(t, fresh.Answered())
	assert.Equal(t, 1, fresh.Requests)
}

// A provider with TurnBound ends a turn that loops past it with text; a
// responder's own call id is sent as given, and the reply canary rides in
// every answer's text and call ids.
func TestTurnBoundCallIDAndReplyCanary(t *testing.T) {
	t.Parallel()
	const reply = "reply-alpha-0123456789"
	s := start(t, fakellm.Options{ReplyCanary: reply, TurnBound: 3, Responder: func(r fakellm.Record) fakellm.Response {
		if r.Turn().Answered() {
			return fakellm.Text("done")
		}
		return fakellm.ToolCalls(fakellm.Call{Name: "terminal", Args: map[string]any{"command": "true"}, ID: "atk-0a1b2c3d4e"})
	}})
	ask := func(msgs ...map[string]any) map[string]any {
		t.Helper()
		resp := post(t, s.BaseURL+"/chat/completions", nil, map[string]any{"model": "m", "messages": msgs,
			"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "terminal"}}}})
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var out struct {
			Choices []struct {
				Message map[string]any `json:"message"`
			} `json:"choices"`
		}
		require.NoError(t, json.Unmarshal(b, &out), "%s", b)
		return out.Choices[0].Message
	}
	user := map[string]any{"role": "user", "content": "go"}
	m := ask(user)
	calls := m["tool_calls"].([]any)
	id := calls[0].(map[string]any)["id"].(string)
	assert.Equal(t, "atk-0a1b2c3d4e-"+reply, id, "the responder's id, with the reply canary")

	facts := map[string]any{"role": "user", "content": "runtime facts"}
	done := ask(user, m, map[string]any{"role": "tool", "tool_call_id": id, "content": "ok"}, facts)
	assert.Equal(t, "done ["+reply+"]", done["content"], "the result is found before the facts message")

	// A target that never hands the result back loops: the bound ends it.
	msgs := []map[string]any{user}
	for range 3 {
		msgs = append(msgs, m, facts)
	}
	last := ask(msgs...)
	assert.True(t, strings.HasPrefix(last["content"].(string), fakellm.LoopedText), "got %v", last["content"])
	recs := s.Requests()
	require.Len(t, recs, 3)
	assert.Equal(t, []string{"atk-0a1b2c3d4e-" + reply}, recs[0].Calls, "the record names the call ids sent")
	assert.False(t, recs[1].Looped(3))
	assert.True(t, recs[2].Looped(3), "%d requests", recs[2].Turn().Requests)
	assert.Equal(t, fmt.Sprint(4), fmt.Sprint(recs[2].Turn().Requests))
}
