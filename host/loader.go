package host

import (
	"context"

	"github.com/tenantcanary/tenantcanary/isolation"
	"github.com/tenantcanary/tenantcanary/plugin"
)

// Backend is the server side a plugin reaches through its Context: tool
// dispatch and the facades. agentd implements it; every call carries the
// session it runs as.
type Backend interface {
	// DispatchTool runs one of the server's tools (a plugin's included) as
	// session.
	DispatchTool(ctx context.Context, session, tool string, args map[string]any) (string, error)
	// Facade runs one facade call ("state" get/set, "llm" complete) as
	// session and returns plain data.
	Facade(ctx context.Context, session, facade, method string, args []string) (string, error)
}

// Loader is what the server holds for a profile's plugins, whichever
// isolation mode loaded them: a *Manager (host) or an *InProcess.
type Loader interface {
	// Plugins reports every discovered plugin and how loading it went.
	Plugins(ctx context.Context) ([]PluginStatus, error)
	// Tools lists the tools of the plugins that loaded.
	Tools(ctx context.Context) ([]ToolSpec, error)
	// Call runs a plugin tool as session.
	Call(ctx context.Context, session, tool string, args map[string]any) (string, error)
	// Hook runs every hook registered for event, as session.
	Hook(ctx context.Context, session, event string, payload map[string]any) error
	MemoryProvider(ctx context.Context, name string) (plugin.MemoryProvider, error)
	ImageGenProvider(ctx context.Context, name string) (plugin.ImageGenProvider, error)
	ModelProvider(ctx context.Context, name string) (plugin.ModelProvider, error)
	// ConfigSchema runs the config schema function a plugin registered.
	ConfigSchema(ctx context.Context, pluginName string) (map[string]any, error)
	Close() error
}

var (
	_ Loader = (*Manager)(nil)
	_ Loader = (*InProcess)(nil)
)

// PluginStatus is how loading one plugin went.
type PluginStatus struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	Dir  string `json:"dir"`
	// Error is why the plugin did not load ("" when it did).
	Error    string   `json:"error,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// Findings are the boundary's effects on what the plugin used, judged
	// into Verdict with isolation.Judge (as the audit does).
	Findings  []isolation.Finding `json:"findings,omitempty"`
	Verdict   isolation.Verdict   `json:"verdict"`
	Tools     []ToolSpec          `json:"tools,omitempty"`
	Hooks     []HookSpec          `json:"hooks,omitempty"`
	Providers []ProviderSpec      `json:"providers,omitempty"`
	HasSchema bool                `json:"has_schema,omitempty"`
}

// ToolSpec describes a plugin tool.
type ToolSpec struct {
	Name        string         `json:"name"`
	Plugin      string         `json:"plugin"`
	Toolset     string         `json:"toolset,omitempty"`
	Description string         `json:"description,omitempty"`
	Schema      map[string]any `json:"schema,omitempty"`
}

// HookSpec is one registered hook.
type HookSpec struct {
	Event  string `json:"event"`
	Plugin string `json:"plugin"`
	Ref    Ref    `json:"ref"`
}

// Provider kinds.
const (
	KindMemory   = "memory"
	KindImageGen = "image_gen"
	KindModel    = "model"
)

// ProviderSpec is one registered provider object.
type ProviderSpec struct {
	Kind    string               `json:"kind"`
	Name    string               `json:"name"`
	Plugin  string               `json:"plugin"`
	Ref     Ref                  `json:"ref"`
	Profile *plugin.ModelProfile `json:"profile,omitempty"`
}
