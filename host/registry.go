package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/tenantcanary/tenantcanary/isolation"
	"github.com/tenantcanary/tenantcanary/plugin"
	"github.com/tenantcanary/tenantcanary/plugin/pluginload"
)

// reach is how a plugin's Context reaches the server: directly (in-process)
// or over the wire (in a host).
type reach interface {
	dispatch(ctx context.Context, tool string, args map[string]any) (string, error)
	facade(ctx context.Context, facade, method string, args []string) (string, error)
}

// registry holds what the plugins loaded in this process registered: the
// host child's state, and the in-process loader's.
type registry struct {
	gen      uint64
	hostMode bool
	reach    reach
	out      io.Writer
	env      []string // a restricted (in-process) plugin's environment
	mode     isolation.Mode
	source   isolation.Source

	mu       sync.Mutex
	nextID   uint64
	statuses []PluginStatus
	tools    map[string]*toolEntry
	hooks    map[uint64]*hookEntry
	objects  map[uint64]*objEntry
	schemas  map[string]func() (map[string]any, error)

	// plain maps the thread running a plain Handler (which gets no
	// context; it runs locked to its thread) to its call's context, so
	// the handler's nested calls run as the session of the call that
	// invoked it.
	plainMu sync.Mutex
	plain   map[int]context.Context // by thread id
}

type toolEntry struct {
	plugin string
	tool   plugin.Tool
}

type hookEntry struct {
	plugin, event string
	fn            plugin.Hook
}

type objEntry struct {
	kind, name, plugin string
	obj                any
}

func newRegistry(gen uint64, hostMode bool, r reach, out io.Writer) *registry {
	if out == nil {
		out = io.Discard
	}
	mode := isolation.InProcess
	if hostMode {
		mode = isolation.Host
	}
	return &registry{
		gen: gen, hostMode: hostMode, reach: r, out: out, mode: mode,
		tools: map[string]*toolEntry{}, hooks: map[uint64]*hookEntry{},
		objects: map[uint64]*objEntry{}, schemas: map[string]func() (map[string]any, error){},
		plain: map[int]context.Context{},
	}
}

// load interprets one plugin and commits its registrations if it loaded.
func (g *registry) load(f pluginload.Found) PluginStatus {
	rec := &recorder{name: f.Name, hostMode: g.hostMode, reach: g.reach, g: g}
	// The one question before user code runs in this process: in a host
	// (isolation.HostProcessEnv) it is always yes; in the server it
	// depends on the profile's mode.
	if err := isolation.MayLoadInProcess("plugin "+f.Name, g.source, g.mode); err != nil {
		return g.record(PluginStatus{Name: f.Name, Kind: f.Kind, Dir: f.Dir, Error: err.Error()})
	}
	if !g.hostMode {
		// In this process a panic on a goroutine of the plugin's own would
		// end the server: such code runs only in a host.
		hz, err := isolation.InProcessHazards(f.Dir)
		if err == nil && len(hz) > 0 {
			err = fmt.Errorf("plugin %s starts goroutines, which only a plugin host can run safely "+
				"(set plugins.isolation: %s): %s: %w", f.Name, isolation.Host, strings.Join(hz, "; "), ErrUnsupported)
		}
		if err != nil {
			return g.record(PluginStatus{Name: f.Name, Kind: f.Kind, Dir: f.Dir, Error: err.Error()})
		}
	}
	err := pluginload.Load(f.Dir, rec, pluginload.Options{Out: g.out, Unrestricted: g.hostMode, Env: g.env})
	rec.mu.Lock()
	if err == nil && rec.refusal != nil {
		err = rec.refusal
	}
	st := PluginStatus{Name: f.Name, Kind: f.Kind, Dir: f.Dir, Warnings: append([]string(nil), rec.warnings...)}
	st.Findings = isolation.Normalize(rec.findings)
	rec.mu.Unlock()
	st.Verdict, _ = isolation.Judge(st.Findings)
	if err == nil {
		err = g.commit(rec, &st)
	}
	if err != nil {
		st.Error = err.Error()
		st.Tools, st.Hooks, st.Providers, st.HasSchema = nil, nil, nil, false
	}
	return g.record(st)
}

func (g *registry) record(st PluginStatus) PluginStatus {
	g.mu.Lock()
	g.statuses = append(g.statuses, st)
	g.mu.Unlock()
	return st
}

func (g *registry) commit(rec *recorder, st *PluginStatus) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, t := range rec.tools {
		if prev, ok := g.tools[t.Name]; ok {
			return fmt.Errorf("plugin %s: tool %q is already registered by plugin %s", rec.name, t.Name, prev.plugin)
		}
	}
	for _, t := range rec.tools {
		g.tools[t.Name] = &toolEntry{plugin: rec.name, tool: t}
		st.Tools = append(st.Tools, ToolSpec{Name: t.Name, Plugin: rec.name, Toolset: t.Toolset, Description: t.Description, Schema: t.Schema})
	}
	for _, h := range rec.hooks {
		g.nextID++
		g.hooks[g.nextID] = &hookEntry{plugin: rec.name, event: h.event, fn: h.fn}
		st.Hooks = append(st.Hooks, HookSpec{Event: h.event, Plugin: rec.name, Ref: Ref{g.gen, g.nextID}})
	}
	for _, o := range rec.objects {
		g.nextID++
		g.objects[g.nextID] = &objEntry{kind: o.kind, name: o.name, plugin: rec.name, obj: o.obj}
		ps := ProviderSpec{Kind: o.kind, Name: o.name, Plugin: rec.name, Ref: Ref{g.gen, g.nextID}}
		if m, ok := o.obj.(plugin.ModelProvider); ok {
			p := m.Profile()
			ps.Profile = &p
		}
		st.Providers = append(st.Providers, ps)
	}
	if rec.schema != nil {
		g.schemas[rec.name] = rec.schema
		st.HasSchema = true
	}
	return nil
}

func (g *registry) plugins() []PluginStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]PluginStatus(nil), g.statuses...)
}

// guard runs fn, turning a panic into an ErrPlugin error.
func guard(what string, fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s panicked: %v: %w", what, r, ErrPlugin)
		}
	}()
	return fn()
}

func pluginErr(what string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrPlugin) || errors.Is(err, ErrTimeout) || errors.Is(err, ErrUnavailable) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, &Error{Code: CodePlugin, Message: err.Error()})
}

func (g *registry) callTool(ctx context.Context, name string, args map[string]any) (string, error) {
	g.mu.Lock()
	e := g.tools[name]
	g.mu.Unlock()
	if e == nil {
		return "", fmt.Errorf("tool %q: %w", name, ErrNotFound)
	}
	var out string
	err := guard("tool "+name, func() error {
		var err error
		if e.tool.ContextHandler != nil {
			out, err = e.tool.ContextHandler(ctx, args)
			return err
		}
		// The handler runs locked to this thread, so the thread names its
		// call: no other goroutine runs here until it returns.
		runtime.LockOSThread()
		id := syscall.Gettid()
		g.plainMu.Lock()
		g.plain[id] = ctx
		g.plainMu.Unlock()
		defer func() {
			g.plainMu.Lock()
			delete(g.plain, id)
			g.plainMu.Unlock()
			runtime.UnlockOSThread()
		}()
		out, err = e.tool.Handler(args)
		return err
	})
	if err == nil {
		return out, nil
	}
	return out, pluginErr(fmt.Sprintf("tool %s of plugin %s", name, e.plugin), err)
}

func (g *registry) checkRef(r Ref) error {
	if r.Gen != g.gen {
		return fmt.Errorf("reference of generation %d reached generation %d: %w", r.Gen, g.gen, ErrStaleRef)
	}
	return nil
}

func (g *registry) runHook(ctx context.Context, r Ref, payload map[string]any) error {
	if err := g.checkRef(r); err != nil {
		return err
	}
	g.mu.Lock()
	h := g.hooks[r.ID]
	g.mu.Unlock()
	if h == nil {
		return fmt.Errorf("hook %d: %w", r.ID, ErrNotFound)
	}
	err := guard("hook "+h.event, func() error { return h.fn(ctx, payload) })
	return pluginErr(fmt.Sprintf("hook %s of plugin %s", h.event, h.plugin), err)
}

func (g *registry) hookRefs(event string) []Ref {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []Ref
	for id, h := range g.hooks {
		if h.event == event {
			out = append(out, Ref{g.gen, id})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID }) // registration order
	return out
}

func (g *registry) object(r Ref) (*objEntry, error) {
	if err := g.checkRef(r); err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	o := g.objects[r.ID]
	if o == nil {
		return nil, fmt.Errorf("provider %d: %w", r.ID, ErrNotFound)
	}
	return o, nil
}

func (g *registry) objectByName(kind, name string) *objEntry {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, o := range g.objects {
		if o.kind == kind && o.name == name {
			return o
		}
	}
	return nil
}

func (g *registry) schema(ctx context.Context, pluginName string) (map[string]any, error) {
	g.mu.Lock()
	fn := g.schemas[pluginName]
	g.mu.Unlock()
	if fn == nil {
		return nil, fmt.Errorf("config schema of plugin %q: %w", pluginName, ErrNotFound)
	}
	var out map[string]any
	err := guard("config schema of plugin "+pluginName, func() error {
		var err error
		out, err = fn()
		return err
	})
	return out, pluginErr("config schema of plugin "+pluginName, err)
}

// providerArgs is the body of a provider call.
type providerArgs struct {
	Ref       Ref            `json:"ref"`
	Method    string         `json:"method"`
	SessionID string         `json:"session_id,omitempty"`
	Query     string         `json:"query,omitempty"`
	User      string         `json:"user,omitempty"`
	Assistant string         `json:"assistant,omitempty"`
	Prompt    string         `json:"prompt,omitempty"`
	Options   map[string]any `json:"options,omitempty"`
}

// callProvider runs one provider method in this process.
func (g *registry) callProvider(ctx context.Context, a providerArgs) (any, error) {
	o, err := g.object(a.Ref)
	if err != nil {
		return nil, err
	}
	what := fmt.Sprintf("%s provider %s of plugin %s: %s", o.kind, o.name, o.plugin, a.Method)
	var out any
	err = guard(what, func() error {
		var err error
		switch p := o.obj.(type) {
		case plugin.MemoryProvider:
			switch a.Method {
			case "is_available":
				out = p.IsAvailable(ctx)
			case "initialize":
				err = p.Initialize(ctx, a.SessionID)
			case "prefetch":
				out, err = p.Prefetch(ctx, a.Query)
			case "sync_turn":
				err = p.SyncTurn(ctx, a.User, a.Assistant)
			case "shutdown":
				// Optional (a provider written for v0.2.0 has none).
				if s, ok := p.(plugin.Shutdowner); ok {
					err = s.Shutdown(ctx, a.SessionID)
				}
			default:
				err = fmt.Errorf("no method %q: %w", a.Method, ErrNotFound)
			}
		case plugin.ImageGenProvider:
			if a.Method != "generate" {
				return fmt.Errorf("no method %q: %w", a.Method, ErrNotFound)
			}
			out, err = p.Generate(ctx, a.Prompt, a.Options)
		case plugin.ModelProvider:
			switch a.Method {
			case "profile":
				out = p.Profile()
			case "build_extra_body":
				out, err = p.BuildExtraBody(ctx, a.SessionID)
			default:
				err = fmt.Errorf("no method %q: %w", a.Method, ErrNotFound)
			}
		}
		return err
	})
	return out, pluginErr(what, err)
}

// recorder is the plugin.Context a plugin's Register receives. In a host it
// enforces the isolation package's boundary tables.
type recorder struct {
	name     string
	hostMode bool
	reach    reach
	g        *registry // for the plain Handlers' calls

	mu       sync.Mutex // findings may grow after loading (State, LLM)
	tools    []plugin.Tool
	hooks    []hookEntry
	objects  []objEntry
	schema   func() (map[string]any, error)
	findings []isolation.Finding
	warnings []string
	refusal  error
}

var _ plugin.Context = (*recorder)(nil)

func (r *recorder) Name() string { return r.name }

// boundary records what the boundary does to method and returns the error
// the plugin gets, if any.
func (r *recorder) boundary(method string) error {
	f, ok := isolation.CheckMethod(method)
	if !ok {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.findings = append(r.findings, f)
	if !r.hostMode {
		return nil
	}
	switch f.Effect {
	case isolation.Unsupported:
		err := fmt.Errorf("plugin %s calls %s, which cannot run in a plugin host: %s: %w", r.name, method, f.Reason, ErrUnsupported)
		if r.refusal == nil {
			r.refusal = err
		}
		return err
	case isolation.Skipped:
		r.warnings = append(r.warnings, fmt.Sprintf("%s skipped in the plugin host: %s", method, f.Reason))
	}
	return nil
}

func (r *recorder) RegisterTool(t plugin.Tool) error {
	if t.Name == "" {
		return fmt.Errorf("plugin %s: register a tool with no name", r.name)
	}
	if (t.Handler == nil) == (t.ContextHandler == nil) {
		return fmt.Errorf("plugin %s: tool %q needs exactly one of Handler and ContextHandler", r.name, t.Name)
	}
	if _, err := json.Marshal(t.Schema); err != nil {
		return fmt.Errorf("plugin %s: tool %q schema is not plain data: %w", r.name, t.Name, err)
	}
	r.tools = append(r.tools, t)
	return nil
}

func (r *recorder) RegisterHook(event string, h plugin.Hook) error {
	if event == "" || h == nil {
		return fmt.Errorf("plugin %s: register a hook needs an event name and a function", r.name)
	}
	if f, ok := isolation.CheckHook(event); ok {
		r.findings = append(r.findings, f)
		if r.hostMode {
			r.warnings = append(r.warnings, fmt.Sprintf("hook %s is degraded in the plugin host: %s", event, f.Reason))
		}
	}
	r.hooks = append(r.hooks, hookEntry{plugin: r.name, event: event, fn: h})
	return nil
}

func (r *recorder) addObject(method, kind, name string, obj any) error {
	if err := r.boundary(method); err != nil {
		return err
	}
	if name == "" {
		return fmt.Errorf("plugin %s: %s: the provider has no name", r.name, method)
	}
	r.objects = append(r.objects, objEntry{kind: kind, name: name, plugin: r.name, obj: obj})
	return nil
}

func (r *recorder) RegisterMemoryProvider(p plugin.MemoryProvider) error {
	if p == nil {
		return fmt.Errorf("plugin %s: RegisterMemoryProvider(nil)", r.name)
	}
	return r.addObject("RegisterMemoryProvider", KindMemory, p.Name(), p)
}

func (r *recorder) RegisterImageGenProvider(p plugin.ImageGenProvider) error {
	if p == nil {
		return fmt.Errorf("plugin %s: RegisterImageGenProvider(nil)", r.name)
	}
	return r.addObject("RegisterImageGenProvider", KindImageGen, p.Name(), p)
}

func (r *recorder) RegisterModelProvider(p plugin.ModelProvider) error {
	if p == nil {
		return fmt.Errorf("plugin %s: RegisterModelProvider(nil)", r.name)
	}
	return r.addObject("RegisterModelProvider", KindModel, p.Profile().Name, p)
}

func (r *recorder) RegisterConfigSchema(fn func() (map[string]any, error)) error {
	if fn == nil {
		return fmt.Errorf("plugin %s: RegisterConfigSchema(nil)", r.name)
	}
	r.schema = fn
	return nil
}

func (r *recorder) RegisterPlatform(name, label string, factory plugin.PlatformFactory) error {
	if err := r.boundary("RegisterPlatform"); err != nil {
		return err
	}
	r.warnings = append(r.warnings, fmt.Sprintf("platform %s registered; this server wires no platform adapters", name))
	return nil
}

func (r *recorder) RegisterPlatformHandler(platform string, factory func(client any) (any, error)) error {
	if err := r.boundary("RegisterPlatformHandler"); err != nil {
		return err
	}
	r.warnings = append(r.warnings, fmt.Sprintf("platform handler for %s registered; this server wires no platform adapters", platform))
	return nil
}

func (r *recorder) RegisterCLICommand(name, help string, run func(args []string) int) error {
	return r.boundary("RegisterCLICommand")
}

func (r *recorder) DispatchTool(ctx context.Context, name string, args map[string]any) (string, error) {
	ctx, err := r.callContext(ctx, "DispatchTool("+name+")")
	if err != nil {
		return "", err
	}
	return r.reach.dispatch(ctx, name, args)
}

// callContext is the context a nested call runs in: ctx when it belongs to
// a call (a ContextHandler's, a hook's, a provider method's), else that of
// the plain Handler running on this goroutine. A call from anywhere else (a
// goroutine the plugin started, code run while loading) has no session
// and is refused.
func (r *recorder) callContext(ctx context.Context, what string) (context.Context, error) {
	if ctx != nil && (plugin.SessionID(ctx) != "" || ctx.Value(callKey{}) != nil) {
		return ctx, nil
	}
	if r.g != nil {
		id := syscall.Gettid()
		r.g.plainMu.Lock()
		c, ok := r.g.plain[id]
		r.g.plainMu.Unlock()
		if ok {
			return c, nil
		}
	}
	return nil, fmt.Errorf("plugin %s: %s belongs to no call, so to no session: make it from a tool handler, "+
		"with a ContextHandler's context to use it from a goroutine of the plugin's own: %w", r.name, what, ErrNotFound)
}

func (r *recorder) State() plugin.State {
	_ = r.boundary("State")
	return stateFacade{r}
}

func (r *recorder) LLM() plugin.LLM {
	_ = r.boundary("LLM")
	return llmFacade{r}
}

// facade makes one facade call in the context of the call it belongs to.
func (r *recorder) facade(ctx context.Context, facade, method string, args []string) (string, error) {
	ctx, err := r.callContext(ctx, facade+"."+method)
	if err != nil {
		return "", err
	}
	return r.reach.facade(ctx, facade, method, args)
}

type stateFacade struct{ r *recorder }

func (s stateFacade) Get(ctx context.Context, key string) (string, error) {
	return s.r.facade(ctx, "state", "get", []string{key})
}

func (s stateFacade) Set(ctx context.Context, key, value string) error {
	_, err := s.r.facade(ctx, "state", "set", []string{key, value})
	return err
}

type llmFacade struct{ r *recorder }

func (l llmFacade) Complete(ctx context.Context, prompt string) (string, error) {
	return l.r.facade(ctx, "llm", "complete", []string{prompt})
}
