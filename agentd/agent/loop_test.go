package agent

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/llm"
	"github.com/tenantcanary/tenantcanary/fakellm"
)

type echoTool struct{}

func (echoTool) Spec() llm.FunctionDef {
	return llm.FunctionDef{Name: "echo", Parameters: json.RawMessage(`{"type":"object"}`)}
}
func (echoTool) Call(ctx context.Context, env *Env, args json.RawMessage) (string, error) {
	var a struct{ Say string }
	if err := json.Unmarshal(args, &a); err != nil {
		return "", err
	}
	if a.Say == "fail" {
		return "", errors.New("echo refused")
	}
	return env.Profile + " says " + a.Say, nil
}

type recorder struct {
	mu     sync.Mutex
	events []string
	stored []llm.Message
}

func (r *recorder) emit(typ string, payload any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, typ)
}

func (r *recorder) persist(ctx context.Context, m llm.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stored = append(r.stored, m)
	return nil
}

func setup(t *testing.T, responder fakellm.Responder) (*llm.Client, *fakellm.Server, *Registry) {
	t.Helper()
	srv, err := fakellm.New(fakellm.Options{Keys: []string{"k"}, Responder: responder})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	reg := NewRegistry()
	require.NoError(t, reg.Register(echoTool{}))
	require.ErrorIs(t, reg.Register(echoTool{}), ErrDuplicateTool)
	return &llm.Client{BaseURL: srv.BaseURL, APIKey: "k", IdleTimeout: 10 * time.Second}, srv, reg
}

func TestLoopRunsToolsUntilText(t *testing.T) {
	t.Parallel()
	client, srv, reg := setup(t, func(r fakellm.Record) fakellm.Response {
		msgs := r.Messages()
		last := msgs[len(msgs)-1]
		if last["role"] == "tool" {
			if len(msgs) > 6 {
				return fakellm.Text("final")
			}
			return fakellm.ToolCalls(fakellm.Call{Name: "echo", Args: map[string]string{"Say": "fail"}}, fakellm.Call{Name: "nope", Args: map[string]string{}})
		}
		return fakellm.ToolCall("echo", map[string]string{"Say": "hi"})
	})
	rec := &recorder{}
	ans, hist, err := Run(context.Background(), Turn{
		Client: client, Model: "m", System: "sys", Tools: reg, Env: &Env{Profile: "work"},
		History: []llm.Message{{Role: "user", Content: "earlier"}, {Role: "assistant", Content: "before"}},
		Emit:    rec.emit, Persist: rec.persist,
	}, "now")
	require.NoError(t, err)
	require.Equal(t, "final", ans)
	require.Equal(t, []string{"message.start", "tool.start", "tool.complete", "tool.start", "tool.complete", "tool.start", "tool.complete", "message.delta", "message.complete"}, rec.events)
	require.Len(t, rec.stored, 7, "user, assistant, tool, assistant, tool, tool, assistant")
	require.Equal(t, append([]llm.Message{{Role: "user", Content: "earlier"}, {Role: "assistant", Content: "before"}}, rec.stored...), hist)
	require.Equal(t, "work says hi", rec.stored[2].Content)
	require.Equal(t, "error: echo refused", rec.stored[4].Content)
	require.Equal(t, `error: unknown tool "nope"`, rec.stored[5].Content)
	first := srv.Requests()[0].Messages()
	require.Equal(t, "system", first[0]["role"])
	require.Equal(t, "earlier", first[1]["content"])
}

func TestLoopIterationCapAndProviderError(t *testing.T) {
	t.Parallel()
	client, _, reg := setup(t, func(r fakellm.Record) fakellm.Response {
		return fakellm.ToolCall("echo", map[string]string{"Say": "again"})
	})
	rec := &recorder{}
	_, _, err := Run(context.Background(), Turn{Client: client, Model: "m", Tools: reg, Env: &Env{}, MaxIterations: 3, Emit: rec.emit}, "loop")
	require.ErrorIs(t, err, ErrIterationCap)
	require.Equal(t, "message.complete", rec.events[len(rec.events)-1])

	client.APIKey = "wrong"
	rec = &recorder{}
	_, _, err = Run(context.Background(), Turn{Client: client, Model: "m", Tools: reg, Emit: rec.emit}, "x")
	var api *llm.APIError
	require.ErrorAs(t, err, &api)
	require.Equal(t, []string{"message.start", "message.complete"}, rec.events)
}

func TestSystemPromptOrder(t *testing.T) {
	t.Parallel()
	require.Equal(t, "soul\n\nmemory\n\ncustom", SystemPrompt(" soul\n", "", "memory", "custom"))
}

func TestRepairAddsMissingToolResults(t *testing.T) {
	t.Parallel()
	call := func(id string) llm.ToolCall {
		return llm.ToolCall{ID: id, Type: "function", Function: llm.FunctionCall{Name: "terminal"}}
	}
	clean := []llm.Message{{Role: "user", Content: "a"}, {Role: "assistant", ToolCalls: []llm.ToolCall{call("1")}}, {Role: "tool", ToolCallID: "1"}, {Role: "assistant", Content: "ok"}}
	require.Equal(t, clean, Repair(clean))

	broken := []llm.Message{
		{Role: "user", Content: "a"},
		{Role: "assistant", ToolCalls: []llm.ToolCall{call("1"), call("2")}},
		{Role: "tool", ToolCallID: "1"},
		{Role: "user", Content: "b"},
		{Role: "assistant", ToolCalls: []llm.ToolCall{call("3")}},
	}
	got := Repair(broken)
	var shape []string
	for _, m := range got {
		shape = append(shape, m.Role+":"+m.ToolCallID)
	}
	require.Equal(t, []string{"user:", "assistant:", "tool:1", "tool:2", "user:", "assistant:", "tool:3"}, shape)
	require.Contains(t, got[3].Content, "interrupted")
	require.Len(t, broken, 5, "the input is not changed")
}

func TestFitDropsOldestWholeTurns(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 400)
	h := []llm.Message{
		{Role: "user", Content: big}, {Role: "assistant", ToolCalls: []llm.ToolCall{{ID: "1"}}}, {Role: "tool", ToolCallID: "1", Content: big},
		{Role: "user", Content: big}, {Role: "assistant", Content: big},
		{Role: "user", Content: "last"},
	}
	require.Equal(t, h, Fit(h, 0, 0), "no limit")
	require.Equal(t, h, Fit(h, 10000, 0), "fits")
	got := Fit(h, 300, 0) // ~1200 characters: the first turn goes
	require.Equal(t, h[3:], got)
	require.Equal(t, "user", got[0].Role, "a turn is never cut in half")
	require.Equal(t, h[5:], Fit(h, 1, 0), "the last turn always stays")
}

// Turn.Check runs before the turn, each model request and each tool call;
// the first refusal ends the turn there, with nothing further run.
func TestCheckStopsTheTurnAtTheNextStep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		refuse   string // the step that is refused
		requests int
		events   []string
	}{
		{"the turn started", 0, []string{"message.start", "message.complete"}},
		{"a model request", 0, []string{"message.start", "message.complete"}},
		{"the tool call echo", 1, []string{"message.start", "message.complete"}},
		{"a model request (a retry)", 1, []string{"message.start", "message.complete"}},
	} {
		t.Run(tc.refuse, func(t *testing.T) {
			t.Parallel()
			first := true
			client, srv, reg := setup(t, func(r fakellm.Record) fakellm.Response {
				if tc.refuse == "a model request (a retry)" && first {
					first = false
					return fakellm.Error(500, "try again")
				}
				if r.EndsWithToolResult() {
					return fakellm.Text("final")
				}
				return fakellm.ToolCall("echo", map[string]string{"Say": "hi"})
			})
			client.MaxRetries, client.Backoff = 2, func(int) time.Duration { return time.Millisecond }
			rec := &recorder{}
			var steps []string
			_, _, err := Run(context.Background(), Turn{
				Client: client, Model: "m", Tools: reg, Env: &Env{Profile: "work"}, Emit: rec.emit, Persist: rec.persist,
				Check: func(_ context.Context, step string) error {
					steps = append(steps, step)
					if step == tc.refuse {
						return errors.New("revoked")
					}
					return nil
				},
			}, "now")
			require.EqualError(t, err, "revoked")
			require.Equal(t, tc.refuse, steps[len(steps)-1])
			require.Len(t, srv.Requests(), tc.requests)
			require.Equal(t, tc.events, rec.events, "no tool started")
		})
	}
}
