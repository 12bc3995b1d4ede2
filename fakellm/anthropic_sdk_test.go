package fakellm_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	anthropicopt "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
)

// newAnthropic is the official Anthropic client pointed at s with key. It
// puts v1/messages after its base URL; the server's base URL ends in /v1.
func newAnthropic(s *fakellm.Server, key string) anthropic.Client {
	return anthropic.NewClient(
		anthropicopt.WithBaseURL(strings.TrimSuffix(s.BaseURL, "v1")),
		anthropicopt.WithAPIKey(key),
		anthropicopt.WithMaxRetries(0),
	)
}

// probeResponder answers a turn with a tool call and tool results with
// text: the shape of every canary run's responder.
func probeResponder(r fakellm.Record) fakellm.Response {
	if r.EndsWithToolResult() {
		return fakellm.Text("probe done")
	}
	return fakellm.ToolCall("terminal", map[string]string{"command": "env"})
}

var anthropicTerminal = []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{
	Name:        "terminal",
	InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"command": map[string]any{"type": "string"}}},
}}}

// TestAnthropicSDKToolLoopEnds drives the tool loop as an agent using the
// official Anthropic SDK does, JSON and streamed: the first answer is a
// tool_use; the tool_result (in a user message: Anthropic has no tool role)
// is answered with text, ending the turn.
func TestAnthropicSDKToolLoopEnds(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		s := start(t, fakellm.Options{Keys: []string{"sk-ant-alice"}, Responder: probeResponder})
		c := newAnthropic(s, "sk-ant-alice")
		params := anthropic.MessageNewParams{
			Model:     "claude-alice",
			MaxTokens: 256,
			Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("run the probe"))},
			Tools:     anthropicTerminal,
		}
		turn := func() *anthropic.Message {
			t.Helper()
			if !stream {
				msg, err := c.Messages.New(testCtx(t), params)
				require.NoError(t, err)
				return msg
			}
			st := c.Messages.NewStreaming(testCtx(t), params)
			var msg anthropic.Message
			for st.Next() {
				require.NoError(t, msg.Accumulate(st.Current()))
			}
			require.NoError(t, st.Err())
			return &msg
		}

		calls := 0
		var last *anthropic.Message
		for round := 0; round < 4; round++ {
			last = turn()
			if last.StopReason != anthropic.StopReasonToolUse {
				break
			}
			params.Messages = append(params.Messages, last.ToParam())
			var results []anthropic.ContentBlockParamUnion
			for _, b := range last.Content {
				if b.Type != "tool_use" {
					continue
				}
				calls++
				assert.Equal(t, "terminal", b.Name)
				var in map[string]string
				require.NoError(t, json.Unmarshal(b.Input, &in))
				assert.Equal(t, "env", in["command"])
				results = append(results, anthropic.NewToolResultBlock(b.ID, "PATH=/bin", false))
			}
			params.Messages = append(params.Messages, anthropic.NewUserMessage(results...))
		}
		require.Equal(t, anthropic.StopReasonEndTurn, last.StopReason, "stream=%v: the tool result ended the loop", stream)
		require.Equal(t, 1, calls, "stream=%v: one tool call, then text", stream)
		require.Len(t, last.Content, 1)
		assert.Equal(t, "probe done", last.Content[0].Text)

		recs := s.Requests()
		require.Len(t, recs, 2)
		assert.False(t, recs[0].EndsWithToolResult())
		assert.True(t, recs[1].EndsWithToolResult(), "the SDK's tool_result block is seen")
		assert.Equal(t, "anthropic", recs[1].API)
		assert.Equal(t, fakellm.KindMain, recs[1].Kind)
		assert.Equal(t, "sk-ant-alice", recs[1].Auth)
	}
}

// TestEndsWithToolResult covers both wire formats, and the user messages
// that are not tool results.
func TestEndsWithToolResult(t *testing.T) {
	t.Parallel()
	rec := func(msgs ...any) fakellm.Record { return fakellm.Record{Body: map[string]any{"messages": msgs}} }
	user := map[string]any{"role": "user", "content": "hi"}
	assert.False(t, rec().EndsWithToolResult())
	assert.False(t, rec(user).EndsWithToolResult())
	assert.True(t, rec(user, map[string]any{"role": "tool", "tool_call_id": "c1", "content": "x"}).EndsWithToolResult(), "OpenAI")
	assert.True(t, rec(user, map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}}}).EndsWithToolResult(), "Anthropic")
	assert.False(t, rec(map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "x"}}}).EndsWithToolResult(),
		"a user message of text blocks is a new turn")
	assert.False(t, rec(map[string]any{"role": "tool"}, user).EndsWithToolResult(), "only the last message counts")
}
