package plugin

import "context"

// Handler runs a tool synchronously. Its result is the tool's output text
// (JSON by convention). It has no context: a nested call it makes
// (DispatchTool, State, LLM) with a nil or background context runs as the
// session of the call that invoked it, found by the goroutine it runs on.
// A goroutine the handler starts belongs to no call, and its nested calls
// are refused: a tool that calls back from goroutines of its own should be
// a ContextHandler and pass its context on.
type Handler func(args map[string]any) (string, error)

// ContextHandler runs a tool with the caller's context: its deadline, and
// the session that made the call (SessionID). Pass that context on to
// Context.DispatchTool and the facades so nested calls run as that session.
type ContextHandler func(ctx context.Context, args map[string]any) (string, error)

// Tool is one tool a plugin offers. Exactly one of Handler and
// ContextHandler is set.
type Tool struct {
	Name           string
	Toolset        string
	Description    string
	Schema         map[string]any
	Handler        Handler
	ContextHandler ContextHandler
}

// Hook is called for a named event (for example "post_tool_call") with a
// payload of plain data.
type Hook func(ctx context.Context, payload map[string]any) error

// MemoryProvider is the interface the server checks for a memory provider.
// One provider object serves every session of its profile: the server
// calls Initialize when a session starts (or before its first turn),
// Prefetch before every turn (its text joins the turn's system prompt) and
// SyncTurn after every turn. Each call's ctx carries the session it is made
// for (SessionID). A provider that also implements Shutdowner is told when
// each session ends.
//
// MemoryProvider is the interface of v0.2.0 and stays so: a method added
// later arrives as an optional interface of its own (Shutdowner), checked
// with a type assertion as io.Copy checks for io.WriterTo, so a provider
// written for an older SDK keeps loading.
type MemoryProvider interface {
	Name() string
	IsAvailable(ctx context.Context) bool
	Initialize(ctx context.Context, sessionID string) error
	Prefetch(ctx context.Context, query string) (string, error)
	SyncTurn(ctx context.Context, user, assistant string) error
}

// Shutdowner is implemented by a memory provider that wants to know when a
// session ends (closed, its connection gone, its profile deleted, the
// server stopping). The server calls Shutdown once per session it called
// Initialize for, with ctx carrying that session.
type Shutdowner interface {
	Shutdown(ctx context.Context, sessionID string) error
}

// ImageGenProvider is the interface the server checks for an image
// generation provider.
type ImageGenProvider interface {
	Name() string
	Generate(ctx context.Context, prompt string, options map[string]any) (map[string]any, error)
}

// ModelProfile is a model provider's static profile data: plain data the
// server may read without running the plugin (it is extracted once and
// cached).
type ModelProfile struct {
	Name    string   `json:"name"`
	BaseURL string   `json:"base_url"`
	EnvVars []string `json:"env_vars"`
}

// ModelProvider is the interface the server checks for a model provider
// (plugin.yaml kind: model-provider).
type ModelProvider interface {
	Profile() ModelProfile
	BuildExtraBody(ctx context.Context, sessionID string) (map[string]any, error)
}

// PlatformFactory builds a platform adapter from its configuration. The
// adapter is a live object bound to the server's event loop, so platform
// adapters load only in-process.
type PlatformFactory func(config map[string]any) (any, error)

// State is the server's session state facade. Every call returns plain data.
type State interface {
	Get(ctx context.Context, key string) (string, error)
	Set(ctx context.Context, key, value string) error
}

// LLM is the server's model facade. Every call returns plain data.
type LLM interface {
	Complete(ctx context.Context, prompt string) (string, error)
}

// Context is what Register receives: the plugin's whole view of the server.
type Context interface {
	// Name is the plugin's name from plugin.yaml.
	Name() string

	RegisterTool(tool Tool) error
	RegisterHook(event string, hook Hook) error
	RegisterMemoryProvider(p MemoryProvider) error
	RegisterImageGenProvider(p ImageGenProvider) error
	RegisterModelProvider(p ModelProvider) error
	// RegisterConfigSchema registers the function that describes the
	// plugin's configuration. It is plugin code, so it runs wherever the
	// plugin runs.
	RegisterConfigSchema(schema func() (map[string]any, error)) error
	RegisterPlatform(name, label string, factory PlatformFactory) error
	RegisterPlatformHandler(platform string, factory func(client any) (any, error)) error
	RegisterCLICommand(name, help string, run func(args []string) int) error

	// DispatchTool calls a tool of the server (which may be another
	// plugin's, or this one's) as the session found in ctx.
	DispatchTool(ctx context.Context, name string, args map[string]any) (string, error)
	State() State
	LLM() LLM
}

type sessionKey struct{}

// WithSession returns ctx carrying the session a call runs as.
func WithSession(ctx context.Context, session string) context.Context {
	return context.WithValue(ctx, sessionKey{}, session)
}

// SessionID is the session ctx runs as, or "" when it carries none.
func SessionID(ctx context.Context) string {
	s, _ := ctx.Value(sessionKey{}).(string)
	return s
}
