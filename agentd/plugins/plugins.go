package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/agentd/agent"
	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/homefs"
	"github.com/tenantcanary/tenantcanary/agentd/llm"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
	"github.com/tenantcanary/tenantcanary/agentd/scope"
	"github.com/tenantcanary/tenantcanary/host"
	"github.com/tenantcanary/tenantcanary/isolation"
	"github.com/tenantcanary/tenantcanary/plugin"
	"github.com/tenantcanary/tenantcanary/plugin/pluginload"
)

// Options configure how a profile's plugins load.
type Options struct {
	// Command runs a plugin host (e.g. [agentd plugin-host]); the profile's
	// plugins.host.launcher is put before it.
	Command []string
	// Backend serves the plugins' nested calls (DispatchTool, facades).
	Backend host.Backend
	// Pooled says the server serves, or can serve, more than one profile
	// from one process (every agentd command that builds a server: serve,
	// gateway, tui, cron tick): a profile whose configuration does not set
	// plugins.isolation runs its plugins in a host.
	Pooled bool
	// CallTimeout, when set, replaces plugins.host.call_timeout (tests).
	CallTimeout time.Duration
	// Faults are seeded isolation bugs (test-only; see package faults).
	Faults faults.Set
	// Self is the argv that runs agentd again: the default launcher's
	// Landlock launcher (`agentd sandbox-exec`).
	Self []string
}

type valueKey struct{}

// loaded is one profile's plugins; loader is nil when it has none.
type loaded struct {
	loader host.Loader
	mode   isolation.Mode
	lost   *lostContext // the context-lost fault, when seeded
}

func (l *loaded) Close() error {
	if l.loader == nil {
		return nil
	}
	return l.loader.Close()
}

// HasPlugins reports whether the folder dir of home (a profile's
// "plugins") holds at least one plugin folder (a subfolder with a
// plugin.yaml, or one of model-providers/). It is read through the home:
// the folder, a plugin folder or its plugin.yaml being a symlink is an
// error (homefs.ErrLink, homefs.ErrLinkOut), since a plugin linked in from
// another home would be loaded, fingerprinted and cached as this one's.
func HasPlugins(home homefs.Home, dir string) (bool, error) {
	entries, err := home.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	found := false
	for _, e := range entries {
		if !e.IsDir() && e.Type()&os.ModeSymlink == 0 {
			continue
		}
		sub := path.Join(dir, e.Name())
		d, err := home.OpenDir(sub) // refuses a link, wherever it points
		if err != nil {
			return false, err
		}
		d.Close()
		ok, err := home.CheckFile(path.Join(sub, "plugin.yaml"))
		if err != nil {
			return false, err
		}
		if !ok && e.Name() == pluginload.ModelProvidersDir {
			ok, err = HasPlugins(home, sub)
			if err != nil {
				return false, err
			}
		}
		found = found || ok
	}
	return found, nil
}

// Loader returns the profile's plugin loader, made once per scope (and
// closed with it): nil when the profile has no plugins when first asked.
func Loader(sc *scope.Scope, opts Options) (host.Loader, isolation.Mode, error) {
	v, err := sc.Value(valueKey{}, func() (any, error) {
		dir := sc.Profile.File("plugins")
		has, err := HasPlugins(sc.Profile.FS(), "plugins")
		if err != nil {
			return nil, fmt.Errorf("plugins of profile %q: %w", sc.Profile.Name, err)
		}
		if !has {
			return &loaded{}, nil
		}
		if opts.Backend == nil {
			return nil, errors.New("load plugins: no backend for their nested calls")
		}
		snap, err := sc.Load()
		if err != nil {
			return nil, err
		}
		set, err := settingsOf(sc.Profile)
		if err != nil {
			return nil, fmt.Errorf("plugins of profile %q: %w", sc.Profile.Name, err)
		}
		for _, w := range set.Warnings {
			sc.Log.Warn("plugins: " + w)
		}
		if opts.Pooled {
			set = set.ForPooled()
		}
		callTimeout := set.Limits.CallTimeout
		if opts.CallTimeout > 0 {
			callTimeout = opts.CallTimeout
		}
		enabled := snap.Config.Plugins.Enabled
		backend := opts.Backend
		var lost *lostContext
		if opts.Faults.Has(faults.ContextLost) {
			lost = &lostContext{b: backend}
			backend = lost
		}
		mode := set.Mode
		if opts.Faults.Has(faults.PluginInProcess) {
			mode = isolation.InProcess // the bug: plugins.isolation: host is ignored
		}
		if mode == isolation.Host {
			if len(opts.Command) == 0 {
				return nil, fmt.Errorf("plugins of profile %q: host mode needs a plugin host command", sc.Profile.Name)
			}
			launcher, sandboxed := set.Launcher, "plugins.host.launcher"
			ownPIDNS := false
			if len(launcher) == 0 {
				l, mode, err := DefaultLauncher(sc.Profile, opts)
				if err != nil {
					return nil, fmt.Errorf("plugins of profile %q: %w", sc.Profile.Name, err)
				}
				launcher, sandboxed = l, string(mode)
				// bwrap's PID namespace ends with the host (see
				// host.Config.OwnPIDNamespace); not so with the
				// host-shared-pidns fault.
				ownPIDNS = mode == sandbox.Bwrap && !opts.Faults.Has(faults.HostSharedPIDNS)
			}
			m, err := host.New(host.Config{
				Profile:         sc.Profile.Name,
				Command:         append(append([]string(nil), launcher...), opts.Command...),
				Home:            sc.Profile.Home,
				FollowLinks:     sc.Profile.FS().FollowLinks,  // the home-follows-links fault (test-only)
				SpecialFiles:    sc.Profile.FS().SpecialFiles, // the home-special-files fault (test-only)
				Env:             snap.ToolEnv,                 // the profile's environment only, sent over the protocol
				OwnPIDNamespace: ownPIDNS,
				TrustProfileEnv: opts.Faults.Has(faults.HostEnvTrusted), // test-only
				EnvOutside:      opts.Faults.Has(faults.LauncherEnv),    // test-only: the host's launcher runs with the profile's environment
				// The model-provider extraction runs with no credential: the
				// server's environment scrubbed as every tool's is (it says
				// how to run this program again: PATH, and the variable a
				// program embedding agentd re-executes itself by) and the
				// home, never the profile's .env.
				ExtractEnv:  append(profile.Scrub(os.Environ()), "HOME="+sc.Profile.Home),
				PluginsDir:  dir,
				Enabled:     enabled,
				Backend:     backend,
				Log:         sc.LogWriter(),
				CallTimeout: callTimeout,
				Limits:      host.LimitsOf(set.Limits),
			})
			if err != nil {
				return nil, fmt.Errorf("plugins of profile %q: %w", sc.Profile.Name, err)
			}
			sc.Log.Info("plugins: host mode", "why", set.Why, "launcher", sandboxed, "argv", set.Launcher, "call_timeout", callTimeout,
				"memory_limit", set.Limits.Memory, "cpu_limit", set.Limits.CPU)
			return &loaded{loader: m, mode: mode, lost: lost}, nil
		}
		ip, err := host.LoadInProcess(host.InProcessConfig{
			Profile: sc.Profile.Name, Mode: mode, Source: isolation.SourceUser, PluginsDir: dir, Home: sc.Profile.FS(),
			Enabled: enabled, Backend: backend, Log: sc.LogWriter(), Env: snap.ToolEnv, CallTimeout: callTimeout,
		})
		if err != nil {
			return nil, fmt.Errorf("plugins of profile %q: %w", sc.Profile.Name, err)
		}
		sc.Log.Info("plugins: in-process mode", "why", set.Why)
		return &loaded{loader: ip, mode: mode, lost: lost}, nil
	})
	if err != nil {
		return nil, "", err
	}
	l := v.(*loaded)
	if l.lost != nil && l.loader != nil {
		return lostLoader{Loader: l.loader, lost: l.lost}, l.mode, nil
	}
	return l.loader, l.mode, nil
}

// settingsOf resolves the profile's plugins settings: the managed scope's
// over the profile's own config as profile.OwnConfig gives it, without
// the keys only the operator may set (plugins.isolation, plugins.host.*).
func settingsOf(p profile.Profile) (isolation.Settings, error) {
	own, _, err := p.OwnConfig()
	if err != nil {
		return isolation.Settings{}, err
	}
	managed, err := p.ManagedConfig()
	if err != nil {
		return isolation.Settings{}, err
	}
	set := isolation.Resolve(own, managed)
	return set, set.Err()
}

// DefaultLauncher is the plugin host's launcher when plugins.host.launcher
// is not set: the profile's sandbox in the mode terminal.sandbox resolves
// to (own PID namespace, only its own home and agentd's executable), or
// none (nil) when that mode is none. An operator's or the profile's
// launcher overrides it.
func DefaultLauncher(p profile.Profile, opts Options) ([]string, sandbox.Mode, error) {
	set, err := p.TerminalSandbox()
	if err != nil {
		return nil, "", err
	}
	mode, _ := sandbox.Effective(set.Mode)
	if mode == sandbox.None {
		return nil, mode, nil
	}
	if err := sandbox.Available(mode); err != nil {
		return nil, "", fmt.Errorf("sandbox the plugin host (terminal.sandbox %s in %s): %w", mode, set.From, err)
	}
	pol, err := p.SandboxPolicy(mode, "", opts.Self)
	if err != nil {
		return nil, "", err
	}
	if len(opts.Command) > 0 {
		exe := opts.Command[0]
		if !filepath.IsAbs(exe) {
			if exe, err = exec.LookPath(exe); err != nil {
				return nil, "", fmt.Errorf("sandbox the plugin host: find %s: %w", opts.Command[0], err)
			}
			if exe, err = filepath.Abs(exe); err != nil {
				return nil, "", fmt.Errorf("sandbox the plugin host: %w", err)
			}
		}
		pol.ReadOnly = append(pol.ReadOnly, exe)
	}
	pol.SharedPID = opts.Faults.Has(faults.HostSharedPIDNS) // the bug: the host sees every process
	prefix, err := pol.Prefix()
	if err != nil {
		return nil, "", fmt.Errorf("sandbox the plugin host: %w", err)
	}
	return prefix, mode, nil
}

// lostContext is the context-lost fault: nested calls run as the session
// whose call started the plugins, whoever makes them.
type lostContext struct {
	b     host.Backend
	mu    sync.Mutex
	first string
}

func (l *lostContext) remember(session string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.first == "" {
		l.first = session
	}
}

func (l *lostContext) session() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first
}

func (l *lostContext) DispatchTool(ctx context.Context, _ string, tool string, args map[string]any) (string, error) {
	return l.b.DispatchTool(ctx, l.session(), tool, args)
}

func (l *lostContext) Facade(ctx context.Context, _ string, facade, method string, args []string) (string, error) {
	return l.b.Facade(ctx, l.session(), facade, method, args)
}

// lostLoader records the first calling session for lostContext.
type lostLoader struct {
	host.Loader
	lost *lostContext
}

func (l lostLoader) Call(ctx context.Context, session, tool string, args map[string]any) (string, error) {
	l.lost.remember(session)
	return l.Loader.Call(ctx, session, tool, args)
}

// Registry is the tools of the profile's turns: builtins, then the tools
// of its plugins (a plugin tool named like a built-in one is left out). An
// error loading or listing the plugins is returned with the built-in
// registry, so turns go on without them.
func Registry(ctx context.Context, sc *scope.Scope, builtins []agent.Tool, opts Options) (*agent.Registry, error) {
	reg := agent.NewRegistry()
	loader, _, lerr := Loader(sc, opts)
	hooks := loader
	if loader != nil && opts.Faults.Has(faults.GlobalHooks) {
		hooks = globalHooks(loader) // the bug: hooks keyed process-wide
	}
	for _, t := range builtins {
		if loader != nil {
			t = &hooked{Tool: t, loader: hooks, log: sc.Log}
		}
		if err := reg.Register(t); err != nil {
			return reg, err
		}
	}
	// model.provider: plugin:<name> serves the turns' model calls from the
	// profile's own plugins (and says why not when it cannot).
	reg.SetModelProvider(&modelProvider{sc: sc, loader: loader})
	if lerr != nil || loader == nil {
		return reg, lerr
	}
	mem := memoryOf(ctx, sc, loader)
	if opts.Faults.Has(faults.GlobalMemory) {
		mem = globalMemory(mem) // the bug: memory providers keyed process-wide
	}
	if mem != nil {
		reg.SetMemory(mem)
	}
	bad := unloadedOf(ctx, sc, loader)
	if len(bad.messages()) > 0 {
		reg.SetMissing(bad.missing)
	}
	reg.SetHook(func(ctx context.Context, env *agent.Env, event string, payload map[string]any) {
		if event == agent.HookSessionStart {
			bad.report(env) // the session's owner hears which plugins did not load
		}
		session := ""
		if env != nil {
			session = env.Session
		}
		payload["session_id"] = session
		(&hooked{loader: hooks, log: sc.Log}).hook(ctx, session, event, payload)
	})
	logStatus(ctx, sc, loader)
	specs, err := loader.Tools(ctx)
	var errs []error
	if err != nil {
		// With its restart budget spent the host lists the tools it had:
		// they stay offered, and calling one says why it cannot run.
		errs = append(errs, fmt.Errorf("list plugin tools of profile %q: %w", sc.Profile.Name, err))
		if !errors.Is(err, host.ErrBudgetExhausted) {
			return reg, errs[0]
		}
	}
	for _, spec := range specs {
		if err := reg.Register(&hooked{Tool: &Tool{spec: spec, loader: loader}, loader: hooks, log: sc.Log}); err != nil {
			errs = append(errs, fmt.Errorf("plugin %s: %w", spec.Plugin, err))
		}
	}
	if names := imageProvidersOf(ctx, sc, loader); len(names) > 0 {
		if err := reg.Register(&hooked{Tool: &imageTool{loader: loader, providers: names}, loader: hooks, log: sc.Log}); err != nil {
			errs = append(errs, fmt.Errorf("image providers %s: %w", strings.Join(names, ", "), err))
		}
	}
	return reg, errors.Join(errs...)
}

// Tool is a plugin's tool as the agent loop sees it.
type Tool struct {
	spec   host.ToolSpec
	loader host.Loader
}

// Spec implements agent.Tool.
func (t *Tool) Spec() llm.FunctionDef {
	params := json.RawMessage(`{"type":"object"}`)
	if len(t.spec.Schema) > 0 {
		if b, err := json.Marshal(t.spec.Schema); err == nil {
			params = b
		}
	}
	return llm.FunctionDef{Name: t.spec.Name, Description: t.spec.Description, Parameters: params}
}

// Call implements agent.Tool: the plugin runs it as the calling session.
func (t *Tool) Call(ctx context.Context, env *agent.Env, args json.RawMessage) (string, error) {
	var m map[string]any
	if len(args) > 0 {
		if err := json.Unmarshal(args, &m); err != nil {
			return "", fmt.Errorf("%s: bad arguments: %w", t.spec.Name, err)
		}
	}
	session := ""
	if env != nil {
		session = env.Session
	}
	out, err := t.loader.Call(ctx, session, t.spec.Name, m)
	if err != nil && errors.Is(err, host.ErrBudgetExhausted) && env != nil && env.Emit != nil {
		// The user can act on this one (fix or remove the plugin, then
		// restart the server): say it outside the tool result too.
		env.Emit("error", map[string]any{"message": fmt.Sprintf(
			"plugin %s of profile %s cannot run: %v", t.spec.Plugin, env.Profile, err)})
	}
	return out, err
}

// The hook events agentd runs, in the profile's plugins, as the calling
// session: before and after every tool call (built-in or a plugin's), and
// before and after every model call (agent.HookPreLLMCall,
// agent.HookPostLLMCall).
const (
	HookPreToolCall  = "pre_tool_call"
	HookPostToolCall = "post_tool_call"
)

// hooked runs the tool call hooks around a tool. A hook's error is logged;
// it never fails the tool (a dead plugin host must not take the built-in
// tools with it).
type hooked struct {
	agent.Tool
	loader host.Loader
	log    *slog.Logger
}

// Call implements agent.Tool.
func (h *hooked) Call(ctx context.Context, env *agent.Env, args json.RawMessage) (string, error) {
	name := h.Spec().Name
	session := ""
	if env != nil {
		session = env.Session
	}
	var argv any = string(args)
	var m map[string]any
	if json.Unmarshal(args, &m) == nil {
		argv = m
	}
	h.hook(ctx, session, HookPreToolCall, map[string]any{"tool_name": name, "args": argv, "session_id": session})
	out, err := h.Tool.Call(ctx, env, args)
	post := map[string]any{"tool_name": name, "args": argv, "session_id": session, "result": out}
	if err != nil {
		post["error"] = err.Error()
	}
	h.hook(ctx, session, HookPostToolCall, post)
	return out, err
}

func (h *hooked) hook(ctx context.Context, session, event string, payload map[string]any) {
	// A spent restart budget is reported once per call, by the plugin's
	// tool (see Tool.Call), not by every hook of every tool.
	if err := h.loader.Hook(ctx, session, event, payload); err != nil && h.log != nil && !errors.Is(err, host.ErrBudgetExhausted) {
		h.log.Warn("plugins: hook failed", "event", event, "tool", payload["tool_name"], "session", session, "err", err)
	}
}

type statusKey struct{}

// logStatus writes, once per scope, how loading each plugin went to the
// profile's log.
func logStatus(ctx context.Context, sc *scope.Scope, loader host.Loader) {
	_, _ = sc.Value(statusKey{}, func() (any, error) {
		list, err := loader.Plugins(ctx)
		if err != nil {
			sc.Log.Error("plugins: list", "err", err)
			return true, nil
		}
		for _, p := range list {
			if p.Error != "" {
				sc.Log.Error("plugin did not load", "plugin", p.Name, "err", p.Error)
				continue
			}
			sc.Log.Info("plugin loaded", "plugin", p.Name, "tools", len(p.Tools), "verdict", p.Verdict, "warnings", p.Warnings)
			if p.HasSchema {
				// A config schema runs where the plugin runs, once it loads.
				schema, err := loader.ConfigSchema(plugin.WithSession(ctx, ""), p.Name)
				if err != nil {
					sc.Log.Error("plugin config schema failed", "plugin", p.Name, "err", err)
					continue
				}
				keys := make([]string, 0, len(schema))
				for k := range schema {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				sc.Log.Info("plugin config schema", "plugin", p.Name, "keys", keys)
			}
		}
		return true, nil
	})
}

// global is the process-wide state of the global-hooks and global-memory
// faults (test-only): the first profile's hooks and memory serve every
// profile.
var global struct {
	mu     sync.Mutex
	hooks  host.Loader
	memory *memory
}

// globalHooks is the loader the global-hooks fault runs every profile's
// hooks in: the first one it was given.
func globalHooks(l host.Loader) host.Loader {
	global.mu.Lock()
	defer global.mu.Unlock()
	if global.hooks == nil {
		global.hooks = l
	}
	return global.hooks
}

// globalMemory is the memory the global-memory fault gives every profile:
// the first profile's that had one.
func globalMemory(m *memory) *memory {
	global.mu.Lock()
	defer global.mu.Unlock()
	if global.memory == nil && m != nil {
		global.memory = m
	}
	return global.memory
}

// Reload closes the profile's plugin hosts and forgets what was read of
// its plugins (the loader, its memory and image providers, what did not
// load): the next turn finds the plugins its home holds then. A plugin
// call in flight on the old hosts fails.
func Reload(sc *scope.Scope) error {
	if err := sc.Forget(statusKey{}, unloadedKey{}, imagesKey{}, memoryKey{}, valueKey{}); err != nil {
		return fmt.Errorf("reload plugins of profile %q: %w", sc.Profile.Name, err)
	}
	return nil
}
