package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/tenantcanary/tenantcanary/agentd/llm"
	"github.com/tenantcanary/tenantcanary/agentd/terminal"
)

// Env is what a tool call may reach: the things of the session that made
// the call, and of its profile, and nothing else.
type Env struct {
	Session string // live session id
	Stored  string // stored session id
	Profile string // profile name
	Home    string // profile home
	// Shell returns the session's persistent shell, starting it if needed.
	Shell func(ctx context.Context) (*terminal.Shell, error)
	// Emit, when set, sends an event to the session's connection (a tool
	// reports an error the user can act on with an "error" event).
	Emit func(typ string, payload any)
}

// Tool is one tool the model may call.
type Tool interface {
	// Spec is the tool's name, description and parameter schema.
	Spec() llm.FunctionDef
	// Call runs the tool with the model's JSON arguments. An error is
	// reported to the model as the tool's result; the turn goes on.
	Call(ctx context.Context, env *Env, args json.RawMessage) (string, error)
}

// ErrDuplicateTool is returned when registering a name twice.
var ErrDuplicateTool = errors.New("tool already registered")

// Registry holds the tools offered to the model. Safe for concurrent use.
type Registry struct {
	mu     sync.RWMutex
	tools  map[string]Tool
	hook   HookFunc
	memory Memory
	model  ModelProvider
	miss   MissingFunc
}

// MissingFunc answers a call of a tool the registry does not hold: its
// text is the call's result (a plugin that did not load can say so there).
type MissingFunc func(ctx context.Context, env *Env, name string) string

// SetMissing sets what answers a call of a tool the registry does not hold;
// nil (the default) answers that the tool is unknown.
func (r *Registry) SetMissing(f MissingFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.miss = f
}

// missing is the result of a call of the unknown tool name.
func (r *Registry) missing(ctx context.Context, env *Env, name string) string {
	if r != nil {
		r.mu.RLock()
		f := r.miss
		r.mu.RUnlock()
		if f != nil {
			return f(ctx, env, name)
		}
	}
	return fmt.Sprintf("error: unknown tool %q", name)
}

// HookFunc runs the hooks registered for event (plugins' hooks, say) as
// the turn's session. Run calls it before and after each model call
// (HookPreLLMCall, HookPostLLMCall); it must not fail the turn.
type HookFunc func(ctx context.Context, env *Env, event string, payload map[string]any)

// The model call hook events Run fires through the registry's HookFunc.
const (
	HookPreLLMCall  = "pre_llm_call"
	HookPostLLMCall = "post_llm_call"
)

// The session hook events StartSession and EndSession fire through the
// registry's HookFunc.
const (
	HookSessionStart = "on_session_start"
	HookSessionEnd   = "on_session_end"
)

// Memory is a session's memory: StartSession opens it for the session, Run
// asks it before each turn for text to add to the system prompt and gives
// it the turn's exchange after, EndSession closes it for the session. None
// may fail the turn or the session.
type Memory interface {
	Start(ctx context.Context, env *Env)
	Prefetch(ctx context.Context, env *Env, query string) string
	Sync(ctx context.Context, env *Env, user, assistant string)
	End(ctx context.Context, env *Env)
}

// HasSessionWork reports whether StartSession and EndSession do anything
// (a hook function or a memory is set).
func (r *Registry) HasSessionWork() bool {
	if r == nil {
		return false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.hook != nil || r.memory != nil
}

// StartSession runs the session start hooks (HookSessionStart) and opens
// the memory for the session of env. The server calls it when a session
// is created or resumed, once the session can take nested calls.
func (r *Registry) StartSession(ctx context.Context, env *Env, payload map[string]any) {
	if r == nil || env == nil {
		return
	}
	if mem := r.mem(); mem != nil {
		mem.Start(ctx, env)
	}
	r.runHook(ctx, env, HookSessionStart, sessionPayload(env, payload))
}

// EndSession runs the session end hooks (HookSessionEnd) and closes the
// memory for the session of env. The server calls it when the session
// ends: closed, its connection gone, its profile deleted, the server
// stopping, a detached turn done.
func (r *Registry) EndSession(ctx context.Context, env *Env, payload map[string]any) {
	if r == nil || env == nil {
		return
	}
	r.runHook(ctx, env, HookSessionEnd, sessionPayload(env, payload))
	if mem := r.mem(); mem != nil {
		mem.End(ctx, env)
	}
}

func sessionPayload(env *Env, extra map[string]any) map[string]any {
	p := map[string]any{"session_id": env.Session, "stored_session_id": env.Stored, "profile": env.Profile}
	for k, v := range extra {
		p[k] = v
	}
	return p
}

// ModelProvider serves a profile's model calls from elsewhere than its
// configured provider (a plugin's model provider, model.provider:
// plugin:<name>).
type ModelProvider interface {
	// Client returns the client of env's session's model calls, made from
	// base, the profile's own.
	Client(ctx context.Context, env *Env, base *llm.Client) (*llm.Client, error)
}

// SetModelProvider sets the model provider of the registry's turns.
func (r *Registry) SetModelProvider(p ModelProvider) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.model = p
}

// ModelClient is the client of env's session's model calls: base, or what
// the registry's model provider makes of it.
func (r *Registry) ModelClient(ctx context.Context, env *Env, base *llm.Client) (*llm.Client, error) {
	if r == nil {
		return base, nil
	}
	r.mu.RLock()
	p := r.model
	r.mu.RUnlock()
	if p == nil {
		return base, nil
	}
	return p.Client(ctx, env, base)
}

// SetMemory sets the memory Run consults.
func (r *Registry) SetMemory(m Memory) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.memory = m
}

func (r *Registry) mem() Memory {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.memory
}

// SetHook sets the function Run calls at its hook points.
func (r *Registry) SetHook(h HookFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hook = h
}

// runHook calls the registry's HookFunc, if any.
func (r *Registry) runHook(ctx context.Context, env *Env, event string, payload map[string]any) {
	if r == nil {
		return
	}
	r.mu.RLock()
	h := r.hook
	r.mu.RUnlock()
	if h != nil {
		h(ctx, env, event, payload)
	}
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{tools: map[string]Tool{}} }

// Register adds a tool; its name must be new.
func (r *Registry) Register(t Tool) error {
	name := t.Spec().Name
	if name == "" {
		return errors.New("register tool: empty name")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.tools[name]; ok {
		return fmt.Errorf("register tool %q: %w", name, ErrDuplicateTool)
	}
	r.tools[name] = t
	return nil
}

// Get returns the named tool.
func (r *Registry) Get(name string) (Tool, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.tools[name]
	return t, ok
}

// Specs returns the tools as offered to the model, sorted by name.
func (r *Registry) Specs() []llm.Tool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]llm.Tool, 0, len(r.tools))
	for _, t := range r.tools {
		out = append(out, llm.Tool{Type: "function", Function: t.Spec()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Function.Name < out[j].Function.Name })
	return out
}

// TerminalTool runs a command in the session's persistent shell.
type TerminalTool struct{}

// Spec implements Tool.
func (TerminalTool) Spec() llm.FunctionDef {
	return llm.FunctionDef{
		Name:        "terminal",
		Description: "Run a bash command in this session's persistent shell (exported variables and the working directory persist between calls). Returns its output and exit status.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"command":{"type":"string","description":"the bash command to run"}},"required":["command"]}`),
	}
}

// Call implements Tool.
func (TerminalTool) Call(ctx context.Context, env *Env, args json.RawMessage) (string, error) {
	var a struct {
		Command string `json:"command"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return "", fmt.Errorf("terminal: bad arguments %s: %w", abbrev(string(args)), err)
	}
	if strings.TrimSpace(a.Command) == "" {
		return "", errors.New(`terminal: argument "command" is empty`)
	}
	if env == nil || env.Shell == nil {
		return "", errors.New("terminal: this session has no shell")
	}
	sh, err := env.Shell(ctx)
	if err != nil {
		return "", fmt.Errorf("terminal: %w", err)
	}
	res, err := sh.Run(ctx, a.Command)
	if err != nil {
		return "", fmt.Errorf("terminal: %w", err)
	}
	return FormatResult(res), nil
}

// FormatResult renders a command's result for the model.
func FormatResult(res terminal.Result) string {
	var b strings.Builder
	if res.Restarted != "" {
		fmt.Fprintf(&b, "[shell restarted: %s; exported variables and cd from before are gone]\n", res.Restarted)
	}
	b.WriteString(res.Output)
	if res.Truncated > 0 {
		fmt.Fprintf(&b, "\n[output truncated: %d more bytes dropped]", res.Truncated)
	}
	switch {
	case res.TimedOut:
		b.WriteString("\n[command timed out: the shell was killed; the next command starts a new one]")
	case res.Exited:
		b.WriteString("\n[the shell exited; the next command starts a new one]")
	case res.ExitCode != 0:
		fmt.Fprintf(&b, "\n[exit status %d]", res.ExitCode)
	}
	return b.String()
}

func abbrev(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
