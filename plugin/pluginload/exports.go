package pluginload

import (
	"context"
	"reflect"
	"strings"

	"github.com/tenantcanary/tenantcanary/plugin"
)

// Symbols exposes the plugin SDK to the interpreter (the table `yaegi
// extract` would generate, written by hand: it is small). Interpreted types
// reach the SDK's interfaces through the _plugin_* wrappers.
var Symbols = map[string]map[string]reflect.Value{
	"github.com/tenantcanary/tenantcanary/plugin/plugin": sdkSymbols(),
	// Composed wrappers: an interpreted value passed as an SDK interface
	// keeps the optional methods it has (see composed below).
	".": {"MapTypes": reflect.ValueOf(composed)},
}

// composed lists, for an SDK interface's wrapper, the wrappers that add
// optional interfaces to it, most methods first. The interpreter wraps an
// interpreted value in the first one whose methods the value all has, so a
// memory provider with a Shutdown method satisfies plugin.Shutdowner on the
// server's side, and one without (written for v0.2.0) still loads.
var composed = map[reflect.Value][]reflect.Type{
	reflect.ValueOf((*_plugin_MemoryProvider)(nil)): {
		reflect.TypeOf(_plugin_MemoryProviderShutdowner{}),
	},
}

type _plugin_ImageGenProvider struct {
	IValue    interface{}
	WGenerate func(ctx context.Context, prompt string, options map[string]any) (map[string]any, error)
	WName     func() string
}

func (W _plugin_ImageGenProvider) Generate(ctx context.Context, prompt string, options map[string]any) (map[string]any, error) {
	return W.WGenerate(ctx, prompt, options)
}
func (W _plugin_ImageGenProvider) Name() string { return W.WName() }

type _plugin_MemoryProvider struct {
	IValue       interface{}
	WInitialize  func(ctx context.Context, sessionID string) error
	WIsAvailable func(ctx context.Context) bool
	WName        func() string
	WPrefetch    func(ctx context.Context, query string) (string, error)
	WSyncTurn    func(ctx context.Context, user string, assistant string) error
}

func (W _plugin_MemoryProvider) Initialize(ctx context.Context, sessionID string) error {
	return W.WInitialize(ctx, sessionID)
}
func (W _plugin_MemoryProvider) IsAvailable(ctx context.Context) bool { return W.WIsAvailable(ctx) }
func (W _plugin_MemoryProvider) Name() string                         { return W.WName() }
func (W _plugin_MemoryProvider) Prefetch(ctx context.Context, query string) (string, error) {
	return W.WPrefetch(ctx, query)
}
func (W _plugin_MemoryProvider) SyncTurn(ctx context.Context, user string, assistant string) error {
	return W.WSyncTurn(ctx, user, assistant)
}

type _plugin_ModelProvider struct {
	IValue          interface{}
	WBuildExtraBody func(ctx context.Context, sessionID string) (map[string]any, error)
	WProfile        func() plugin.ModelProfile
}

func (W _plugin_ModelProvider) BuildExtraBody(ctx context.Context, sessionID string) (map[string]any, error) {
	return W.WBuildExtraBody(ctx, sessionID)
}
func (W _plugin_ModelProvider) Profile() plugin.ModelProfile { return W.WProfile() }

// _plugin_MemoryProviderShutdowner is a memory provider that is also a
// plugin.Shutdowner. Its fields after IValue are _plugin_MemoryProvider's
// and then the optional methods', as the interpreter's composed wrappers
// want.
type _plugin_MemoryProviderShutdowner struct {
	IValue       interface{}
	WInitialize  func(ctx context.Context, sessionID string) error
	WIsAvailable func(ctx context.Context) bool
	WName        func() string
	WPrefetch    func(ctx context.Context, query string) (string, error)
	WSyncTurn    func(ctx context.Context, user string, assistant string) error

	WShutdown func(ctx context.Context, sessionID string) error
}

func (W _plugin_MemoryProviderShutdowner) Initialize(ctx context.Context, sessionID string) error {
	return W.WInitialize(ctx, sessionID)
}
func (W _plugin_MemoryProviderShutdowner) IsAvailable(ctx context.Context) bool {
	return W.WIsAvailable(ctx)
}
func (W _plugin_MemoryProviderShutdowner) Name() string { return W.WName() }
func (W _plugin_MemoryProviderShutdowner) Prefetch(ctx context.Context, query string) (string, error) {
	return W.WPrefetch(ctx, query)
}
func (W _plugin_MemoryProviderShutdowner) SyncTurn(ctx context.Context, user string, assistant string) error {
	return W.WSyncTurn(ctx, user, assistant)
}
func (W _plugin_MemoryProviderShutdowner) Shutdown(ctx context.Context, sessionID string) error {
	return W.WShutdown(ctx, sessionID)
}

type _plugin_Shutdowner struct {
	IValue    interface{}
	WShutdown func(ctx context.Context, sessionID string) error
}

func (W _plugin_Shutdowner) Shutdown(ctx context.Context, sessionID string) error {
	return W.WShutdown(ctx, sessionID)
}

// sdkSymbols is the SDK's table: its functions, its types under their own
// names, and the _plugin_* wrappers under "_" and the interface's name. A
// type's entry is named after the type, so the two cannot drift apart.
func sdkSymbols() map[string]reflect.Value {
	table := map[string]reflect.Value{
		"SessionID":   reflect.ValueOf(plugin.SessionID),
		"WithSession": reflect.ValueOf(plugin.WithSession),
	}
	for _, typ := range []any{
		(*plugin.Context)(nil), (*plugin.ContextHandler)(nil), (*plugin.Handler)(nil), (*plugin.Hook)(nil),
		(*plugin.ImageGenProvider)(nil), (*plugin.LLM)(nil), (*plugin.MemoryProvider)(nil),
		(*plugin.ModelProfile)(nil), (*plugin.ModelProvider)(nil), (*plugin.PlatformFactory)(nil),
		(*plugin.Shutdowner)(nil), (*plugin.State)(nil), (*plugin.Tool)(nil),
		(*_plugin_ImageGenProvider)(nil), (*_plugin_MemoryProvider)(nil), (*_plugin_ModelProvider)(nil), (*_plugin_Shutdowner)(nil),
	} {
		table[strings.TrimPrefix(reflect.TypeOf(typ).Elem().Name(), "_plugin")] = reflect.ValueOf(typ)
	}
	return table
}
