package llm

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
)

const key = "sk-test-key"

func provider(t *testing.T, script ...fakellm.Response) *fakellm.Server {
	t.Helper()
	srv, err := fakellm.New(fakellm.Options{Keys: []string{key}, Script: script,
		Responder: func(fakellm.Record) fakellm.Response { return fakellm.Text("default") }})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return srv
}

func client(srv *fakellm.Server) *Client {
	return &Client{BaseURL: srv.BaseURL, APIKey: key, MaxRetries: 2, IdleTimeout: 5 * time.Second,
		Backoff: func(int) time.Duration { return time.Millisecond }}
}

var tools = []Tool{{Type: "function", Function: FunctionDef{Name: "terminal", Parameters: json.RawMessage(`{"type":"object"}`)}}}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestStreamTextInDeltas(t *testing.T) {
	t.Parallel()
	srv := provider(t, fakellm.Text("hello streaming world").WithChunkSize(4))
	var deltas []string
	resp, err := client(srv).Stream(ctx(t), Request{Model: "m-1", Messages: []Message{{Role: "user", Content: "hi"}}, Tools: tools},
		func(d string) { deltas = append(deltas, d) })
	require.NoError(t, err)
	require.Equal(t, "hello streaming world", resp.Message.Content)
	require.Greater(t, len(deltas), 3)
	require.Equal(t, "hello streaming world", strings.Join(deltas, ""))
	require.Equal(t, "stop", resp.FinishReason)
	require.NotNil(t, resp.Usage)

	recs := srv.Requests()
	require.Len(t, recs, 1)
	require.Equal(t, key, recs[0].Auth)
	require.Equal(t, "m-1", recs[0].Model())
	require.True(t, recs[0].Stream)
	require.Equal(t, fakellm.KindMain, recs[0].Kind)
}

func TestStreamToolCallsAssembled(t *testing.T) {
	t.Parallel()
	srv := provider(t, fakellm.ToolCalls(
		fakellm.Call{Name: "terminal", Args: map[string]string{"command": "echo one; echo two"}},
		fakellm.Call{Name: "other", Args: map[string]int{"n": 2}},
	).WithChunkSize(3))
	resp, err := client(srv).Stream(ctx(t), Request{Model: "m", Messages: []Message{{Role: "user", Content: "x"}}, Tools: tools}, nil)
	require.NoError(t, err)
	require.Len(t, resp.Message.ToolCalls, 2)
	require.Equal(t, "terminal", resp.Message.ToolCalls[0].Function.Name)
	require.JSONEq(t, `{"command":"echo one; echo two"}`, resp.Message.ToolCalls[0].Function.Arguments)
	require.Equal(t, "other", resp.Message.ToolCalls[1].Function.Name)
	require.JSONEq(t, `{"n":2}`, resp.Message.ToolCalls[1].Function.Arguments)
	require.NotEmpty(t, resp.Message.ToolCalls[0].ID)
	require.Equal(t, "tool_calls", resp.FinishReason)
}

func TestRetriesThenSucceeds(t *testing.T) {
	t.Parallel()
	srv := provider(t,
		fakellm.Error(429, "slow down").WithRetryAfter(5*time.Millisecond),
		fakellm.Error(503, "busy"),
		fakellm.Text("third time"))
	resp, err := client(srv).Stream(ctx(t), Request{Model: "m", Messages: []Message{{Role: "user", Content: "x"}}, Tools: tools}, nil)
	require.NoError(t, err)
	require.Equal(t, "third time", resp.Message.Content)
	require.Equal(t, 3, resp.Attempts)
	require.Len(t, srv.Requests(), 3)
}

func TestRetriesRunOut(t *testing.T) {
	t.Parallel()
	srv := provider(t, fakellm.Error(500, "a"), fakellm.Error(500, "b"), fakellm.Error(500, "c"), fakellm.Text("never"))
	_, err := client(srv).Stream(ctx(t), Request{Model: "m", Messages: []Message{{Role: "user", Content: "x"}}, Tools: tools}, nil)
	var api *APIError
	require.ErrorAs(t, err, &api)
	require.Equal(t, 500, api.Status)
	require.Len(t, srv.Requests(), 3, "MaxRetries 2 means 3 attempts")
}

func TestWrongKeyIsNotRetried(t *testing.T) {
	t.Parallel()
	srv := provider(t)
	c := client(srv)
	c.APIKey = "sk-someone-else"
	_, err := c.Stream(ctx(t), Request{Model: "m", Messages: []Message{{Role: "user", Content: "x"}}}, nil)
	var api *APIError
	require.ErrorAs(t, err, &api)
	require.Equal(t, 401, api.Status)
	require.Len(t, srv.Requests(), 1)

	c.APIKey = ""
	_, err = c.Stream(ctx(t), Request{Model: "m"}, nil)
	require.ErrorIs(t, err, ErrNoKey)
}

func TestDropBeforeAnyTextIsRetried(t *testing.T) {
	t.Parallel()
	srv := provider(t,
		fakellm.DropMidStream(fakellm.ToolCall("terminal", map[string]string{"command": "a long command here"}).WithChunkSize(2), 2),
		fakellm.Text("recovered"))
	resp, err := client(srv).Stream(ctx(t), Request{Model: "m", Messages: []Message{{Role: "user", Content: "x"}}, Tools: tools}, nil)
	require.NoError(t, err)
	require.Equal(t, "recovered", resp.Message.Content)
	require.Equal(t, 2, resp.Attempts)
}

func TestDropAfterTextIsAnError(t *testing.T) {
	t.Parallel()
	srv := provider(t, fakellm.DropMidStream(fakellm.Text("some text that is long").WithChunkSize(2), 3), fakellm.Text("not reached"))
	var got string
	_, err := client(srv).Stream(ctx(t), Request{Model: "m", Messages: []Message{{Role: "user", Content: "x"}}, Tools: tools},
		func(d string) { got += d })
	require.Error(t, err, "text already shown cannot be taken back by a retry")
	require.NotEmpty(t, got)
	require.Len(t, srv.Requests(), 1)
}

func TestStallTimesOut(t *testing.T) {
	t.Parallel()
	srv := provider(t, fakellm.StallMidStream(fakellm.Text("stalling text here").WithChunkSize(2), 1))
	c := client(srv)
	c.IdleTimeout = 100 * time.Millisecond
	c.MaxRetries = 0
	_, err := c.Stream(ctx(t), Request{Model: "m", Messages: []Message{{Role: "user", Content: "x"}}, Tools: tools}, nil)
	require.ErrorIs(t, err, ErrStalled)
}

func TestHangEndsWithContext(t *testing.T) {
	t.Parallel()
	srv := provider(t, fakellm.Hang())
	c := client(srv)
	c.IdleTimeout = time.Minute
	cctx, cancel := context.WithCancel(ctx(t))
	go func() {
		_, _ = srv.WaitRequests(cctx, fakellm.KindMain, 1)
		cancel()
	}()
	_, err := c.Stream(cctx, Request{Model: "m", Messages: []Message{{Role: "user", Content: "x"}}, Tools: tools}, nil)
	require.True(t, errors.Is(err, context.Canceled), "got %v", err)
}

func TestExtraBodyAddsFieldsButNeverReplacesTheRequests(t *testing.T) {
	t.Parallel()
	srv := provider(t, fakellm.Text("hi"))
	c := client(srv)
	c.ExtraBody = map[string]any{"reasoning": map[string]any{"effort": "low"}, "model": "not-this-one", "stream": false}
	_, err := c.Stream(ctx(t), Request{Model: "m1", Messages: []Message{{Role: "user", Content: "x"}}}, nil)
	require.NoError(t, err)
	body := srv.Requests()[0].Body
	require.Equal(t, map[string]any{"effort": "low"}, body["reasoning"])
	require.Equal(t, "m1", body["model"], "an extra field replaced the request's own")
	require.Equal(t, true, body["stream"])
}
