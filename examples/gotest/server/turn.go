package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"
)

// message is one message of an OpenAI chat-completions conversation.
type message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []toolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// terminalTool is the one tool the server offers its model.
var terminalTool = map[string]any{"type": "function", "function": map[string]any{
	"name": "terminal", "description": "Run a shell command in the profile's working folder.",
	"parameters": map[string]any{"type": "object", "required": []string{"command"},
		"properties": map[string]any{"command": map[string]any{"type": "string"}}},
}}

// maxRounds bounds the provider calls of one turn.
const maxRounds = 8

// emitter sends a turn's events (nothing, for a cron job's turn).
type emitter func(typ string, payload map[string]any)

// runTurn runs one turn of a conversation in profile pr: it asks the
// profile's provider, runs the tool calls it answers with, and asks again
// until it answers with text. It returns that text and the messages the
// turn added (the user's first), which the caller stores.
func (p *pool) runTurn(ctx context.Context, pr profile, history []message, text string, emit emitter) (string, []message, error) {
	added := []message{{Role: "user", Content: text}}
	cfg, err := pr.config()
	if err != nil {
		return "", added, err
	}
	env, err := pr.dotEnv()
	if err != nil {
		return "", added, err
	}
	key := p.keys.key(cfg.Model.KeyEnv, env)
	system := []message{{Role: "system", Content: pr.systemPrompt(cfg)}}
	for range maxRounds {
		msgs := append(append(append([]message(nil), system...), history...), added...)
		reply, err := complete(ctx, cfg, key, msgs)
		if err != nil {
			return "", added, err
		}
		added = append(added, reply)
		if len(reply.ToolCalls) == 0 {
			emit("message.delta", map[string]any{"text": reply.Content})
			return reply.Content, added, nil
		}
		for _, call := range reply.ToolCalls {
			var args map[string]any
			_ = json.Unmarshal([]byte(call.Function.Arguments), &args) // bad arguments: the tool says so
			emit("tool.start", map[string]any{"tool_id": call.ID, "name": call.Function.Name, "args": args})
			out := p.runTool(ctx, pr, cfg, env, call.Function.Name, args)
			emit("tool.complete", map[string]any{"tool_id": call.ID, "name": call.Function.Name, "result": out})
			added = append(added, message{Role: "tool", ToolCallID: call.ID, Content: out})
		}
	}
	return "", added, fmt.Errorf("the model called tools %d times without answering", maxRounds)
}

var httpClient = &http.Client{Timeout: 2 * time.Minute}

// complete asks the profile's provider (OpenAI chat completions) for the
// next message.
func complete(ctx context.Context, cfg config, key string, msgs []message) (message, error) {
	body, err := json.Marshal(map[string]any{"model": cfg.Model.Default, "messages": msgs, "tools": []any{terminalTool}})
	if err != nil {
		return message{}, err
	}
	url := strings.TrimSuffix(cfg.Model.BaseURL, "/") + "/chat/completions"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return message{}, fmt.Errorf("provider: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := httpClient.Do(req)
	if err != nil {
		return message{}, fmt.Errorf("provider: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return message{}, fmt.Errorf("provider: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return message{}, fmt.Errorf("provider: HTTP %d: %.300s", resp.StatusCode, data)
	}
	var out struct {
		Choices []struct {
			Message message `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(data, &out); err != nil || len(out.Choices) == 0 {
		return message{}, fmt.Errorf("provider: unreadable reply: %.300s", data)
	}
	m := out.Choices[0].Message
	m.Role = "assistant"
	return m, nil
}

// maxToolOutput caps what a tool call hands back to the model.
const maxToolOutput = 64 << 10

// runTool runs the terminal tool: the command in a sandboxed subprocess
// (sandbox.go), in the profile's terminal.cwd, with the server's PATH and
// the profile's .env as its whole environment (inside the sandbox only).
func (p *pool) runTool(ctx context.Context, pr profile, cfg config, env map[string]string, name string, args map[string]any) string {
	command, _ := args["command"].(string)
	if name != "terminal" || command == "" {
		return fmt.Sprintf("error: unknown tool %q or no command (the terminal tool takes {\"command\": \"...\"})", name)
	}
	dir, err := p.checkCwd(pr, cfg.Terminal.Cwd)
	if err != nil {
		return "error: " + err.Error()
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	vars := []string{"PATH=" + os.Getenv("PATH"), "TERM=dumb"}
	names := make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		vars = append(vars, k+"="+env[k])
	}
	cmd, feed, err := shell(ctx, dir, command, vars)
	if err != nil {
		return "error: " + err.Error()
	}
	if feed != nil {
		defer feed.Close()
	}
	out, err := cmd.CombinedOutput()
	if len(out) > maxToolOutput {
		out = out[:maxToolOutput]
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return fmt.Sprintf("%s\n(exit status %d)", out, exit.ExitCode())
	case err != nil:
		return fmt.Sprintf("%s\nerror: %v", out, err)
	}
	return string(out)
}
