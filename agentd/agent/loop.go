package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/tenantcanary/tenantcanary/agentd/llm"
)

// DefaultMaxIterations caps model calls per turn when Turn.MaxIterations is 0.
const DefaultMaxIterations = 16

// ErrIterationCap means the model kept calling tools past the cap.
var ErrIterationCap = errors.New("turn reached its iteration cap")

// Turn is everything one turn needs; nothing in it is shared with another
// profile.
type Turn struct {
	Client        *llm.Client
	Model         string
	System        string
	History       []llm.Message // earlier messages of the session (no system message)
	Tools         *Registry
	Env           *Env
	MaxIterations int
	// ContextLength is the model's context in tokens (model.context_length);
	// when set, the oldest whole turns of History are left out of a request
	// that would not fit (about 4 characters a token). 0 sends everything.
	ContextLength int

	// Emit receives the turn events (message.start, message.delta,
	// tool.start, tool.complete, message.complete) as they happen.
	Emit func(typ string, payload any)
	// Persist commits one message of the session as it is made (the user
	// message first). A failure ends the turn.
	Persist func(ctx context.Context, m llm.Message) error
	// Check, when set, runs before the turn does anything, before each
	// model request (and its hooks) and before each tool call; an error
	// ends the turn with it (message.complete status error) and nothing
	// further runs. agentd re-checks the credential of the connection
	// that started the turn here.
	Check func(ctx context.Context, step string) error
}

// Run plays one turn for the user's text and returns the answer and the
// session's messages after it (History plus this turn's). It always emits
// message.start first and message.complete last (status "error" with the
// error's text when it fails).
func Run(ctx context.Context, t Turn, text string) (answer string, history []llm.Message, err error) {
	emit := t.Emit
	if emit == nil {
		emit = func(string, any) {}
	}
	history = append([]llm.Message(nil), t.History...)
	emit("message.start", map[string]any{})
	defer func() {
		if err != nil {
			emit("message.complete", map[string]any{"text": err.Error(), "status": "error"})
			return
		}
		emit("message.complete", map[string]any{"text": answer, "status": "complete"})
	}()
	check := func(step string) error {
		if t.Check == nil {
			return nil
		}
		return t.Check(ctx, step)
	}
	if err := check("the turn started"); err != nil {
		return "", history, err
	}
	persist := func(m llm.Message) error {
		history = append(history, m)
		if t.Persist == nil {
			return nil
		}
		if err := t.Persist(ctx, m); err != nil {
			return fmt.Errorf("persist %s message: %w", m.Role, err)
		}
		return nil
	}
	if err := persist(llm.Message{Role: "user", Content: text}); err != nil {
		return "", history, err
	}
	maxIter := t.MaxIterations
	if maxIter <= 0 {
		maxIter = DefaultMaxIterations
	}
	var specs []llm.Tool
	if t.Tools != nil {
		specs = t.Tools.Specs()
	}
	client, err := t.Tools.ModelClient(ctx, t.Env, t.Client)
	if err != nil {
		return "", history, err
	}
	if t.Check != nil && client != nil {
		// A retry is a model request too.
		guarded := *client
		guarded.BeforeRetry = func(context.Context) error { return check("a model request (a retry)") }
		client = &guarded
	}
	mem := t.Tools.mem()
	if mem != nil {
		if extra := mem.Prefetch(ctx, t.Env, text); extra != "" {
			t.System = strings.TrimSpace(t.System + "\n\n" + extra)
		}
		defer func() {
			if err == nil {
				mem.Sync(ctx, t.Env, text, answer)
			}
		}()
	}
	for iter := 0; iter < maxIter; iter++ {
		msgs := make([]llm.Message, 0, len(history)+1)
		if t.System != "" {
			msgs = append(msgs, llm.Message{Role: "system", Content: t.System})
		}
		msgs = append(msgs, Fit(Repair(history), t.ContextLength, len(t.System))...)
		if err := check("a model request"); err != nil {
			return "", history, err
		}
		t.Tools.runHook(ctx, t.Env, HookPreLLMCall, map[string]any{"model": t.Model, "messages": len(msgs), "tools": len(specs)})
		resp, err := client.Stream(ctx, llm.Request{Model: t.Model, Messages: msgs, Tools: specs}, func(d string) {
			emit("message.delta", map[string]any{"text": d})
		})
		post := map[string]any{"model": t.Model}
		if err != nil {
			post["error"] = err.Error()
		} else {
			post["text"], post["tool_calls"] = resp.Message.Content, len(resp.Message.ToolCalls)
		}
		t.Tools.runHook(ctx, t.Env, HookPostLLMCall, post)
		if err != nil {
			return "", history, err
		}
		msg := resp.Message
		msg.Role = "assistant"
		if err := persist(msg); err != nil {
			return "", history, err
		}
		if len(msg.ToolCalls) == 0 {
			return msg.Content, history, nil
		}
		for _, call := range msg.ToolCalls {
			if err := check("the tool call " + call.Function.Name); err != nil {
				return "", history, err
			}
			emit("tool.start", map[string]any{"tool_id": call.ID, "name": call.Function.Name, "args": argsValue(call.Function.Arguments)})
			result := runTool(ctx, t.Tools, t.Env, call)
			emit("tool.complete", map[string]any{"tool_id": call.ID, "name": call.Function.Name, "result": result})
			if ctx.Err() != nil {
				return "", history, fmt.Errorf("turn cancelled: %w", ctx.Err())
			}
			if err := persist(llm.Message{Role: "tool", Content: result, ToolCallID: call.ID, Name: call.Function.Name}); err != nil {
				return "", history, err
			}
		}
	}
	return "", history, fmt.Errorf("%w (%d model calls)", ErrIterationCap, maxIter)
}

func runTool(ctx context.Context, reg *Registry, env *Env, call llm.ToolCall) string {
	if reg == nil {
		return reg.missing(ctx, env, call.Function.Name)
	}
	tool, ok := reg.Get(call.Function.Name)
	if !ok {
		return reg.missing(ctx, env, call.Function.Name)
	}
	args := json.RawMessage(call.Function.Arguments)
	if strings.TrimSpace(call.Function.Arguments) == "" {
		args = json.RawMessage("{}")
	}
	out, err := safeToolCall(ctx, tool, env, args)
	if err != nil {
		return "error: " + err.Error()
	}
	return out
}

func safeToolCall(ctx context.Context, tool Tool, env *Env, args json.RawMessage) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("tool %s panicked: %v", tool.Spec().Name, r)
		}
	}()
	return tool.Call(ctx, env, args)
}

// argsValue is the arguments as a JSON value when they parse, else the raw
// string.
func argsValue(s string) any {
	var v any
	if json.Unmarshal([]byte(s), &v) == nil {
		return v
	}
	return s
}

// SystemPrompt joins the parts of the system prompt in order (SOUL.md, then
// memory, then the custom prompt), skipping empty ones.
func SystemPrompt(parts ...string) string {
	var keep []string
	for _, p := range parts {
		if s := strings.TrimSpace(p); s != "" {
			keep = append(keep, s)
		}
	}
	return strings.Join(keep, "\n\n")
}

// Repair returns history with a stand-in result after every tool call that
// has none (a turn cut short by a crash or a cancel), since providers refuse
// a tool call without its result. history itself is not changed.
func Repair(history []llm.Message) []llm.Message {
	answered := map[string]bool{}
	for _, m := range history {
		if m.Role == "tool" {
			answered[m.ToolCallID] = true
		}
	}
	var out []llm.Message
	for i, m := range history {
		if out != nil {
			out = append(out, m)
		}
		var missing []llm.ToolCall
		for _, c := range m.ToolCalls {
			if !answered[c.ID] {
				missing = append(missing, c)
			}
		}
		if m.Role != "assistant" || len(missing) == 0 {
			continue
		}
		if out == nil {
			out = append([]llm.Message(nil), history[:i+1]...)
		}
		// The stand-ins go right after the results that do exist.
		j := i + 1
		for j < len(history) && history[j].Role == "tool" {
			out = append(out, history[j])
			j++
		}
		for _, c := range missing {
			out = append(out, llm.Message{Role: "tool", ToolCallID: c.ID, Name: c.Function.Name,
				Content: "error: no result (the turn was interrupted before this tool call finished)"})
		}
		return append(out, Repair(history[j:])...)
	}
	if out == nil {
		return history
	}
	return out
}

// Fit leaves out the oldest whole turns (a user message and everything up
// to the next one) of history until it fits in contextLength tokens, at
// about 4 characters a token, with reserved characters taken already (the
// system prompt). The last turn is always kept. contextLength 0 keeps all.
func Fit(history []llm.Message, contextLength, reserved int) []llm.Message {
	if contextLength <= 0 {
		return history
	}
	budget := contextLength*4 - reserved
	size := func(m llm.Message) int {
		n := len(m.Content) + 16
		for _, c := range m.ToolCalls {
			n += len(c.Function.Name) + len(c.Function.Arguments) + 16
		}
		return n
	}
	total := 0
	for _, m := range history {
		total += size(m)
	}
	start := 0
	for total > budget {
		// The next turn boundary after start.
		next := start + 1
		for next < len(history) && history[next].Role != "user" {
			next++
		}
		if next >= len(history) {
			break // the last turn stays whole
		}
		for _, m := range history[start:next] {
			total -= size(m)
		}
		start = next
	}
	return history[start:]
}
