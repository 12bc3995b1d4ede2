package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/tenantcanary/tenantcanary/agentd/homefs"
	"github.com/tenantcanary/tenantcanary/isolation"
	"github.com/tenantcanary/tenantcanary/plugin"
)

// InProcessConfig describes a profile's plugins loaded into the calling
// process (plugins.isolation: in_process, or bundled plugins).
type InProcessConfig struct {
	Profile string
	// Mode is the profile's resolved isolation mode; under host the load is
	// refused (isolation.MayLoadInProcess) unless Source is bundled.
	Mode       isolation.Mode
	Source     isolation.Source
	PluginsDir string
	Enabled    []string
	// Home is the profile's home: a PluginsDir inside it is discovered
	// through it (see homefs). Zero: PluginsDir is read by path.
	Home    homefs.Home
	Backend Backend
	// Log receives what plugins print. Nil discards it.
	Log io.Writer
	// Env is the environment plugins see (default: this process's).
	Env []string
	// CallTimeout is the deadline put on calls that have none (default
	// 30s). In-process, a plugin that ignores its context still hangs its
	// caller: that is what host mode is for.
	CallTimeout time.Duration
}

// InProcess is the Loader for plugins interpreted in the calling process.
type InProcess struct {
	cfg InProcessConfig
	reg *registry
}

type directReach struct{ b Backend }

func (d directReach) dispatch(ctx context.Context, tool string, args map[string]any) (string, error) {
	return d.b.DispatchTool(ctx, plugin.SessionID(ctx), tool, args)
}

func (d directReach) facade(ctx context.Context, facade, method string, args []string) (string, error) {
	return d.b.Facade(ctx, plugin.SessionID(ctx), facade, method, args)
}

// LoadInProcess interprets the profile's plugins in this process, after
// asking isolation.MayLoadInProcess for each; a refusal fails the whole
// load with an error wrapping isolation.ErrRefused and runs no plugin code.
func LoadInProcess(cfg InProcessConfig) (*InProcess, error) {
	if cfg.Backend == nil {
		return nil, fmt.Errorf("load plugins of profile %s in-process: InProcessConfig.Backend is nil", cfg.Profile)
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 30 * time.Second
	}
	tp := pluginsOf(cfg.Home, cfg.PluginsDir, cfg.Enabled)
	found, err := tp.discover()
	if err != nil {
		return nil, fmt.Errorf("load plugins of profile %s in-process: %w", cfg.Profile, err)
	}
	for _, f := range found {
		if err := isolation.MayLoadInProcess("plugin "+f.Name+" of profile "+cfg.Profile, cfg.Source, cfg.Mode); err != nil {
			return nil, err
		}
	}
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	p := &InProcess{cfg: cfg, reg: newRegistry(1, false, directReach{cfg.Backend}, cfg.Log)}
	p.reg.env, p.reg.mode, p.reg.source = cfg.Env, cfg.Mode, cfg.Source
	for _, f := range found {
		// The interpreter reads the plugin's files by path, in this
		// process: its folder is first walked through the home, so a
		// FIFO, a link or a huge file there fails the plugin, not the
		// server.
		if _, err := tp.fingerprint(f); err != nil {
			p.reg.record(PluginStatus{Name: f.Name, Kind: f.Kind, Dir: f.Dir, Error: err.Error()})
			continue
		}
		p.reg.load(f)
	}
	return p, nil
}

// Plugins reports how loading each plugin went.
func (p *InProcess) Plugins(ctx context.Context) ([]PluginStatus, error) { return p.reg.plugins(), nil }

// Tools lists the loaded plugins' tools.
func (p *InProcess) Tools(ctx context.Context) ([]ToolSpec, error) {
	var out []ToolSpec
	for _, s := range p.reg.plugins() {
		out = append(out, s.Tools...)
	}
	return out, nil
}

func (p *InProcess) callCtx(ctx context.Context, session string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	// callKey marks it as a call's context (in-process, with no id).
	return context.WithValue(plugin.WithSession(ctx, session), callKey{}, uint64(0)), cancel
}

// Call runs a plugin tool as session.
func (p *InProcess) Call(ctx context.Context, session, tool string, args map[string]any) (string, error) {
	ctx, cancel := p.callCtx(ctx, session)
	defer cancel()
	var out string
	err := p.bounded(ctx, func(ctx context.Context) error {
		var err error
		out, err = p.reg.callTool(ctx, tool, args)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("call tool %s of profile %s in-process: %w", tool, p.cfg.Profile, err)
	}
	return out, nil
}

// bounded runs fn on a goroutine of its own and returns at ctx's end even if
// fn does not: in-process, plugin code that ignores its context (a busy
// loop) cannot be stopped, but it need not hold its caller, the session or
// the server's shutdown. The goroutine is left to finish on its own; only a
// plugin host can end such code.
func (p *InProcess) bounded(ctx context.Context, fn func(context.Context) error) error {
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		fmt.Fprintf(p.log(), "agentd: profile %s: an in-process plugin call ran past its deadline and is still running; "+
			"plugins.isolation: host would have ended it\n", p.cfg.Profile)
		return fmt.Errorf("no answer by the deadline (%v); the call is abandoned but cannot be stopped in-process: %w", ctx.Err(), ErrTimeout)
	}
}

func (p *InProcess) log() io.Writer {
	if p.cfg.Log == nil {
		return io.Discard
	}
	return p.cfg.Log
}

// Hook runs every hook registered for event, as session.
func (p *InProcess) Hook(ctx context.Context, session, event string, payload map[string]any) error {
	ctx, cancel := p.callCtx(ctx, session)
	defer cancel()
	var errs []error
	for _, r := range p.reg.hookRefs(event) {
		if err := p.bounded(ctx, func(ctx context.Context) error { return p.reg.runHook(ctx, r, payload) }); err != nil {
			errs = append(errs, err)
			if errors.Is(err, ErrTimeout) {
				break
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("run hook %s in-process: %w", event, errors.Join(errs...))
	}
	return nil
}

func (p *InProcess) object(kind, name string) (any, error) {
	o := p.reg.objectByName(kind, name)
	if o == nil {
		return nil, fmt.Errorf("%s provider %s: no plugin of profile %s registered it: %w", kind, name, p.cfg.Profile, ErrNotFound)
	}
	return o.obj, nil
}

// MemoryProvider returns the plugin's own object.
func (p *InProcess) MemoryProvider(ctx context.Context, name string) (plugin.MemoryProvider, error) {
	o, err := p.object(KindMemory, name)
	if err != nil {
		return nil, err
	}
	return o.(plugin.MemoryProvider), nil
}

// ImageGenProvider returns the plugin's own object.
func (p *InProcess) ImageGenProvider(ctx context.Context, name string) (plugin.ImageGenProvider, error) {
	o, err := p.object(KindImageGen, name)
	if err != nil {
		return nil, err
	}
	return o.(plugin.ImageGenProvider), nil
}

// ModelProvider returns the plugin's own object.
func (p *InProcess) ModelProvider(ctx context.Context, name string) (plugin.ModelProvider, error) {
	o, err := p.object(KindModel, name)
	if err != nil {
		return nil, err
	}
	return o.(plugin.ModelProvider), nil
}

// ConfigSchema runs the plugin's config schema function.
func (p *InProcess) ConfigSchema(ctx context.Context, pluginName string) (map[string]any, error) {
	return p.reg.schema(ctx, pluginName)
}

// Close forgets the plugins (interpreted code cannot be unloaded).
func (p *InProcess) Close() error { return nil }
