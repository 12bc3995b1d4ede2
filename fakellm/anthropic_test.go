package fakellm_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
)

func anthropicBody(stream bool) map[string]any {
	return map[string]any{
		"model":      "claude-alice",
		"max_tokens": 256,
		"stream":     stream,
		"messages":   []any{map[string]any{"role": "user", "content": "run the probe"}},
		"tools":      []any{map[string]any{"name": "terminal", "input_schema": map[string]any{"type": "object"}}},
	}
}

func TestAnthropicJSON(t *testing.T) {
	t.Parallel()
	s := start(t, fakellm.Options{
		Keys: []string{"sk-ant-alice"},
		Script: []fakellm.Response{
			fakellm.ToolCalls(
				fakellm.Call{Name: "terminal", Args: map[string]string{"command": "env"}},
				fakellm.Call{Name: "broken", Args: `{"oops"`},
			).WithReasoning("plan"),
		},
	})
	resp := post(t, s.BaseURL+"/messages", map[string]string{"x-api-key": "sk-ant-alice", "anthropic-version": "2023-06-01"}, anthropicBody(false))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var msg struct {
		ID         string `json:"id"`
		Type       string `json:"type"`
		Role       string `json:"role"`
		Model      string `json:"model"`
		StopReason string `json:"stop_reason"`
		Content    []struct {
			Type     string          `json:"type"`
			Thinking string          `json:"thinking"`
			ID       string          `json:"id"`
			Name     string          `json:"name"`
			Input    json.RawMessage `json:"input"`
		} `json:"content"`
		Usage struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		} `json:"usage"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&msg))
	assert.Equal(t, "message", msg.Type)
	assert.Equal(t, "assistant", msg.Role)
	assert.Equal(t, "claude-alice", msg.Model)
	assert.Equal(t, "tool_use", msg.StopReason)
	require.Len(t, msg.Content, 3)
	assert.Equal(t, "thinking", msg.Content[0].Type)
	assert.Equal(t, "plan", msg.Content[0].Thinking)
	assert.Equal(t, "tool_use", msg.Content[1].Type)
	assert.Equal(t, "terminal", msg.Content[1].Name)
	assert.JSONEq(t, `{"command":"env"}`, string(msg.Content[1].Input))
	assert.True(t, strings.HasPrefix(msg.Content[1].ID, "toolu_"))
	assert.NotEqual(t, msg.Content[1].ID, msg.Content[2].ID)
	assert.JSONEq(t, `"{\"oops\""`, string(msg.Content[2].Input), "malformed arguments travel as a string")
	assert.Positive(t, msg.Usage.InputTokens)

	r := s.Requests()[0]
	assert.Equal(t, "anthropic", r.API)
	assert.Equal(t, fakellm.KindMain, r.Kind)
	assert.Equal(t, "sk-ant-alice", r.Auth)
	assert.Equal(t, "2023-06-01", r.Headers["anthropic-version"])
}

func TestAnthropicSSE(t *testing.T) {
	t.Parallel()
	s := start(t, fakellm.Options{
		Keys: []string{"sk-ant-alice"},
		Script: []fakellm.Response{
			fakellm.Text("hello from claude").WithReasoning("hmm").WithChunkSize(5),
			fakellm.ToolCall("terminal", map[string]string{"command": "echo hi"}).WithChunkSize(3),
		},
	})
	auth := map[string]string{"authorization": "Bearer sk-ant-alice"}

	resp := post(t, s.BaseURL+"/messages", auth, anthropicBody(true))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	events := readSSE(t, resp.Body)
	var names []string
	var text, thinking strings.Builder
	for _, e := range events {
		names = append(names, e.Name)
		assert.Equal(t, e.Name, e.Data["type"], "event name and data type agree")
		if d, ok := e.Data["delta"].(map[string]any); ok {
			switch d["type"] {
			case "text_delta":
				text.WriteString(d["text"].(string))
			case "thinking_delta":
				thinking.WriteString(d["thinking"].(string))
			}
		}
	}
	assert.Equal(t, "hello from claude", text.String())
	assert.Equal(t, "hmm", thinking.String())
	require.NotEmpty(t, names)
	assert.Equal(t, "message_start", names[0])
	assert.Equal(t, []string{"message_delta", "message_stop"}, names[len(names)-2:])

	resp = post(t, s.BaseURL+"/messages", auth, anthropicBody(true))
	var args strings.Builder
	var stop string
	for _, e := range readSSE(t, resp.Body) {
		if d, ok := e.Data["delta"].(map[string]any); ok {
			if d["type"] == "input_json_delta" {
				args.WriteString(d["partial_json"].(string))
			}
			if sr, ok := d["stop_reason"].(string); ok {
				stop = sr
			}
		}
		if cb, ok := e.Data["content_block"].(map[string]any); ok && cb["type"] == "tool_use" {
			assert.Equal(t, "terminal", cb["name"])
			assert.NotEmpty(t, cb["id"])
		}
	}
	assert.JSONEq(t, `{"command":"echo hi"}`, args.String())
	assert.Equal(t, "tool_use", stop)
}

func TestAnthropicErrorShape(t *testing.T) {
	t.Parallel()
	s := start(t, fakellm.Options{Keys: []string{"sk-ant-alice"}})
	resp := post(t, s.BaseURL+"/messages", map[string]string{"x-api-key": "sk-ant-bob"}, anthropicBody(false))
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	var body struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	assert.Equal(t, "error", body.Type)
	assert.Equal(t, "authentication_error", body.Error.Type)
	assert.Equal(t, "sk-ant-bob", s.Requests()[0].Auth, "recorded before the refusal")
}

func TestBadRequestsAreRecordedAndNamed(t *testing.T) {
	t.Parallel()
	s := start(t, fakellm.Options{})
	cases := []struct {
		method, path, body string
		status             int
		want               string
	}{
		{http.MethodPost, "/v1/chat/completions", "not json", http.StatusBadRequest, "not a JSON object"},
		{http.MethodGet, "/v1/chat/completions", "", http.StatusMethodNotAllowed, "takes POST"},
		{http.MethodPost, "/v1/embeddings", "{}", http.StatusNotFound, "no route"},
		{http.MethodPost, "/v1/models", "{}", http.StatusMethodNotAllowed, "takes GET"},
	}
	for _, c := range cases {
		req, err := http.NewRequestWithContext(testCtx(t), c.method, s.URL+c.path, strings.NewReader(c.body))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, c.status, resp.StatusCode, "%s %s", c.method, c.path)
		assert.Contains(t, string(b), c.want, "%s %s", c.method, c.path)
	}
	recs := s.Requests()
	require.Len(t, recs, len(cases), "every request is recorded, however bad")
	assert.Equal(t, "unknown", recs[2].API)
	assert.Nil(t, recs[0].Body)
	assert.Equal(t, "not json", string(recs[0].RawBody))
}
