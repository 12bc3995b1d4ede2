package harness

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/tenantcanary/tenantcanary/internal/placeholder"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// The abilities of a probe plugin (docs/probe-plugin.md): what the plugin
// scenarios ask of it. A target whose probe plugin lacks one declares it
// in probe_plugin.unsupported with the reason; the checks that need it are
// then skipped with that reason, never passed.
const (
	// AbilityWhere: report its process id, parent's id, a host id unique
	// per host process, and its working folder.
	AbilityWhere = "where"
	// AbilityRead: read the paths it is given and report, per path, "ok"
	// or the error.
	AbilityRead = "read"
	// AbilityEnv: report its whole environment.
	AbilityEnv = "env"
	// AbilityNested: make a nested call back into the server, as the
	// calling session, that runs a shell command in the session's shell.
	AbilityNested = "nested"
	// AbilityLLM: ask the server's LLM facade, as the calling session.
	AbilityLLM = "llm"
	// AbilityState: keep a value by key in the calling session's state,
	// returning the one it found.
	AbilityState = "state"
	// AbilityHostile: run a hostile step of harness/attack's plugin rows
	// (read, append, spawn, ping) from plugin code.
	AbilityHostile = "hostile"
	// AbilityHog: the hostile flood step (hold memory, spin past the
	// call's deadline), whose refusal is the target's limits on a plugin
	// host.
	AbilityHog = "hog"
)

// ProbeAbilities are every ability a probe plugin may declare unsupported.
var ProbeAbilities = []string{AbilityWhere, AbilityRead, AbilityEnv, AbilityNested, AbilityLLM, AbilityState, AbilityHostile, AbilityHog}

// ProbePlugin is a target's probe plugin: the plugin, in the target's own
// plugin format, that the plugin scenarios install into every tenant's
// home and call through the tenant's model (docs/probe-plugin.md is its
// contract). The embedded agentd's is the default (the scenarios package
// gives it); a target file's probe_plugin block replaces it.
type ProbePlugin struct {
	// Name is the plugin's name, for reports.
	Name string `yaml:"name"`
	// Source is the plugin's folder ({target_dir}/...): every file under
	// it is installed (modes kept).
	Source string `yaml:"source"`
	// Install is how the plugin gets into a tenant's home.
	Install PluginInstall `yaml:"install"`
	// Tools names the plugin's tools.
	Tools PluginTools `yaml:"tools"`
	// HostCmdline is a regexp that matches the command line of a
	// tenant's plugin host process (found by the tenant's canaries in its
	// environment, and killed by the host-death checks). Empty: the
	// target has no plugin host of its own to kill, and those checks are
	// skipped with that reason.
	HostCmdline string `yaml:"host_cmdline"`
	// Confined says the target shows each plugin host only its own home
	// (a sandbox of its own making): the checks that a plugin reads no
	// other tenant's home are made. Without it they are made only when
	// the install config takes the harness's {bwrap_launcher} and
	// bubblewrap works here.
	Confined bool `yaml:"confined"`
	// Unsupported maps an ability (ProbeAbilities) the plugin lacks to
	// the reason.
	Unsupported map[string]string `yaml:"unsupported"`

	// Files are the plugin's files by path relative to Install.Path: the
	// embedded default's, given in Go; LoadFiles reads Source's.
	Files map[string]string `yaml:"-"`
}

// PluginInstall is how a probe plugin gets into a tenant's home: its files
// copied to Path, or Hook run; Config merged into the tenant's
// config.yaml either way.
type PluginInstall struct {
	// Path is where, relative to the tenant's home, the plugin's files go
	// (a template: {tenant}, {home}).
	Path string `yaml:"path"`
	// Hook is a command (argv template) run once per tenant, in its
	// hermetic environment with the layout's home variable at its home,
	// instead of copying: {source} is the plugin's folder, {dest} the
	// filled Path, and the tenant's placeholders ({home}, {tenant}, ...).
	Hook []string `yaml:"hook"`
	// Config is deep-merged into every tenant's config.yaml (the
	// tenant's placeholders filled; a string that is exactly
	// "{bwrap_launcher}" becomes the harness's bubblewrap launcher argv
	// for that tenant, or drops its key when there is none).
	Config map[string]any `yaml:"config"`
	// Limits is deep-merged into the operator's managed scope for the
	// hostile plugin's run: the limits (call deadline, memory) that the
	// hog step must run into.
	Limits map[string]any `yaml:"limits"`
	// HostileEnv is added to every tenant's own environment file (.env)
	// for the hostile plugin's run, before its plugin host starts: the
	// variables the server reads for itself that a tenant can write in its
	// own file (agentd: AGENTD_PLUGIN_HOST_KEEPER=inner would turn its
	// host's keeper off). The server must not act on them; the host-death
	// check then finds whatever the hostile plugin left running.
	HostileEnv map[string]string `yaml:"hostile_env"`
}

// PluginTools are the names of a probe plugin's tools.
type PluginTools struct {
	// Probe reports where the plugin runs (AbilityWhere, AbilityRead,
	// AbilityEnv, AbilityNested, AbilityLLM, AbilityState).
	Probe string `yaml:"probe"`
	// Hostile runs a hostile step (AbilityHostile, AbilityHog).
	Hostile string `yaml:"hostile"`
}

// BwrapLauncherVar is the install config's placeholder for the harness's
// bubblewrap launcher of a tenant's plugin host.
const BwrapLauncherVar = "bwrap_launcher"

// Lacks is why the plugin cannot do ability, or "" when it can.
func (p *ProbePlugin) Lacks(ability string) string {
	if p == nil {
		return "the target has no probe plugin"
	}
	return p.Unsupported[ability]
}

// UsesLauncher reports whether the install config takes the harness's
// bubblewrap launcher.
func (p *ProbePlugin) UsesLauncher() bool {
	found := false
	placeholder.WalkStrings(p.Install.Config, func(s string) { found = found || s == "{"+BwrapLauncherVar+"}" })
	return found
}

// IsHost reports whether a process command line is one of the plugin's
// hosts (false when the plugin names none).
func (p *ProbePlugin) IsHost(cmdline string) bool {
	if p.HostCmdline == "" {
		return false
	}
	re := compiled(p.HostCmdline)
	return re != nil && re.MatchString(cmdline)
}

// envName is a variable name a .env line may set.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (p *ProbePlugin) validate() []error {
	if p == nil {
		return nil
	}
	var errs []error
	if p.Name == "" {
		errs = append(errs, errors.New("probe_plugin.name is empty"))
	}
	if p.Source == "" && len(p.Files) == 0 {
		errs = append(errs, errors.New("probe_plugin.source: give the plugin's folder ({target_dir}/...)"))
	} else if p.Source != "" {
		if st, err := os.Stat(p.Source); err != nil || !st.IsDir() {
			errs = append(errs, fmt.Errorf("probe_plugin.source %q: not a folder (%v)", p.Source, err))
		}
	}
	if (p.Install.Path == "") == (len(p.Install.Hook) == 0) {
		errs = append(errs, errors.New("probe_plugin.install: give exactly one of path (copy the files there) or hook (a command)"))
	}
	if filepath.IsAbs(p.Install.Path) || strings.HasPrefix(filepath.Clean(p.Install.Path), "..") {
		errs = append(errs, fmt.Errorf("probe_plugin.install.path %q: want a path inside the tenant's home", p.Install.Path))
	}
	for _, v := range []any{p.Install.Config, p.Install.Path, toAny(p.Install.Hook)} {
		if err := placeholder.Install.Check(v); err != nil {
			errs = append(errs, fmt.Errorf("probe_plugin.install: %w", err))
		}
	}
	if p.Tools.Probe == "" && p.Unsupported[AbilityWhere] == "" {
		errs = append(errs, errors.New("probe_plugin.tools.probe: name the probe tool (or declare every probe ability unsupported)"))
	}
	if p.Tools.Hostile == "" && p.Unsupported[AbilityHostile] == "" {
		errs = append(errs, errors.New("probe_plugin.tools.hostile: name the hostile tool, or declare unsupported.hostile with the reason"))
	}
	for _, k := range slices.Sorted(maps.Keys(p.Install.HostileEnv)) {
		if !envName.MatchString(k) {
			errs = append(errs, fmt.Errorf("probe_plugin.install.hostile_env: %q is not a variable name ([A-Za-z_][A-Za-z0-9_]*)", k))
		}
		if strings.ContainsAny(p.Install.HostileEnv[k], "\n\r\x00") {
			errs = append(errs, fmt.Errorf("probe_plugin.install.hostile_env.%s: a value of one line, with no NUL", k))
		}
	}
	if p.HostCmdline != "" {
		if _, err := regexp.Compile(p.HostCmdline); err != nil {
			errs = append(errs, fmt.Errorf("probe_plugin.host_cmdline: %w", err))
		}
	}
	for _, a := range slices.Sorted(maps.Keys(p.Unsupported)) {
		switch {
		case !slices.Contains(ProbeAbilities, a):
			errs = append(errs, fmt.Errorf("probe_plugin.unsupported: unknown ability %q (known: %s)", a, strings.Join(ProbeAbilities, " ")))
		case strings.TrimSpace(p.Unsupported[a]) == "":
			errs = append(errs, fmt.Errorf("probe_plugin.unsupported.%s: give the reason", a))
		}
	}
	return errs
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// LoadFiles reads the plugin's Source folder (when it has one) into Files,
// so an install copies what the folder held when the run began.
func (p *ProbePlugin) LoadFiles() error {
	files, err := p.readFiles()
	if err != nil || files == nil {
		return err
	}
	p.Files = files
	return nil
}

// readFiles reads the Source folder (nil without one). It changes nothing
// of p: scenarios running at once share their target's ProbePlugin.
func (p *ProbePlugin) readFiles() (map[string]string, error) {
	if p.Source == "" {
		return nil, nil
	}
	files := map[string]string{}
	err := filepath.WalkDir(p.Source, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: only regular files are installed", path)
		}
		rel, err := filepath.Rel(p.Source, path)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("probe plugin %s: read %s: %w", p.Name, p.Source, err)
	}
	return files, nil
}

// InstallProbePlugin installs p into t's home: its config merged into
// t's config.yaml (vars adds placeholders, {bwrap_launcher} among them),
// its files copied to the install path (a file executable in the source
// stays executable) or its install hook run.
func (s *Sandbox) InstallProbePlugin(ctx context.Context, p *ProbePlugin, t *tenants.Tenant, vars map[string]any) error {
	return s.installProbePlugin(ctx, p, t, vars, nil)
}

// InstallHostilePlugin is InstallProbePlugin for the hostile plugin's
// run: t's environment file also gets the install's HostileEnv, as a
// hostile tenant would write it there.
func (s *Sandbox) InstallHostilePlugin(ctx context.Context, p *ProbePlugin, t *tenants.Tenant, vars map[string]any) error {
	return s.installProbePlugin(ctx, p, t, vars, p.Install.HostileEnv)
}

func (s *Sandbox) installProbePlugin(ctx context.Context, p *ProbePlugin, t *tenants.Tenant, vars map[string]any, env map[string]string) error {
	all := TenantVars(t, s.Set.Layout, s.Root)
	for k, v := range vars {
		all[k] = v
	}
	cfg, _ := placeholder.Value(p.Install.Config, all)
	cm, _ := cfg.(map[string]any)
	if err := s.WriteHome(t, tenants.HomeExtras{Config: cm, Env: env}); err != nil {
		return fmt.Errorf("install probe plugin %s for %s: %w", p.Name, t.Name, err)
	}
	files := p.Files
	if files == nil {
		var err error
		if files, err = p.readFiles(); err != nil {
			return err
		}
	}
	dest := ""
	if p.Install.Path != "" {
		d, _ := placeholder.Value(p.Install.Path, all)
		dest = filepath.Join(t.Home, fmt.Sprint(d))
	}
	if len(p.Install.Hook) > 0 {
		params := map[string]any{"source": p.Source, "dest": dest}
		if !t.Launch {
			params["profile"] = t.Name
		}
		if _, err := s.HookRunner()(ctx, "probe_plugin.install", params, p.Install.Hook, nil); err != nil {
			return fmt.Errorf("install probe plugin %s for %s: %w", p.Name, t.Name, err)
		}
		return nil
	}
	for rel, data := range files {
		path := filepath.Join(dest, filepath.FromSlash(rel))
		mode := os.FileMode(0o644)
		if p.Source != "" {
			if st, err := os.Stat(filepath.Join(p.Source, filepath.FromSlash(rel))); err == nil && st.Mode()&0o111 != 0 {
				mode = 0o755
			}
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("install probe plugin %s for %s: %w", p.Name, t.Name, err)
		}
		if err := os.WriteFile(path, []byte(data), mode); err != nil {
			return fmt.Errorf("install probe plugin %s for %s: %w", p.Name, t.Name, err)
		}
	}
	return s.ReloadPlugins(ctx)
}

// AgentdPluginsUnsupported says why the target does not load plugins in
// agentd's format (Go source run through yaegi, against agentd's plugin
// SDK), or "" when it does: the scenarios whose plugins are written
// against that SDK alone (hooks, providers, the chain and state plugins)
// need it. A dialect declaring plugins.install unsupported gives its
// reason; a target with a probe plugin of its own loads its own format.
func (t *Target) AgentdPluginsUnsupported() string {
	if why := t.Dialect.Unsupported("plugins.install"); why != "" {
		return why
	}
	if p := t.ProbePlugin; p != nil {
		return "the target's plugins are its own format (probe plugin " + p.Name + "), not agentd's"
	}
	return ""
}
