package profile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
)

// ProfileVar in a terminal.workdir_roots entry is replaced by the
// profile's name (LaunchName for the launch profile).
const ProfileVar = "{profile}"

// WorkdirRoots reads terminal.workdir_roots from the managed (operator)
// scope (a profile cannot widen its own places, unless it owns its
// operator keys: see OperatorOnly, whose own entries then count too) and
// expands each for p: the absolute folders beneath which p's cwd may lie,
// besides its home. templates are the entries as written. No managed
// scope, or no key, is no root: only the home.
func (p Profile) WorkdirRoots() (roots, templates []string, err error) {
	set, err := p.operatorTerminal("workdir_roots")
	if err != nil {
		return nil, nil, err
	}
	for _, d := range set {
		list, isList := d.raw.([]any)
		if !isList {
			return nil, nil, fmt.Errorf("%w: %s: terminal.workdir_roots: %v is not a list of folders", ErrBadConfig, d.file, d.raw)
		}
		for _, v := range list {
			s, isString := v.(string)
			if !isString || !filepath.IsAbs(s) {
				return nil, nil, fmt.Errorf("%w: %s: terminal.workdir_roots: %v is not an absolute folder (want /path or /path/{profile})", ErrBadConfig, d.file, v)
			}
			templates = append(templates, filepath.Clean(s))
			roots = append(roots, realOrClean(strings.ReplaceAll(filepath.Clean(s), ProfileVar, p.Name)))
		}
	}
	return roots, templates, nil
}

// terminalSetting is one config.yaml's value of a terminal key, and the
// file.
type terminalSetting struct {
	file string
	raw  any
}

// operatorTerminal reads terminal.<key> from the config.yaml files whose
// operator keys count for p, in order: the managed scope's, then p's own
// when it owns its operator keys (see OperatorOnly). A file that does not
// set it (or sets null) is left out; both are read either way.
func (p Profile) operatorTerminal(key string) ([]terminalSetting, error) {
	var docs []yamlDoc
	if p.Managed != "" {
		f := filepath.Join(p.Managed, "config.yaml")
		m, err := readYAMLMap(f)
		if err != nil {
			return nil, err
		}
		docs = append(docs, yamlDoc{f, m})
	}
	if p.OwnOperatorKeys {
		own, err := p.readOwnConfig()
		if err != nil {
			return nil, err
		}
		docs = append(docs, yamlDoc{p.File("config.yaml"), own})
	}
	var set []terminalSetting
	for _, d := range docs {
		term, _ := d.m["terminal"].(map[string]any)
		if raw, ok := term[key]; ok && raw != nil {
			set = append(set, terminalSetting{d.file, raw})
		}
	}
	return set, nil
}

// yamlDoc is a config.yaml read, and its file.
type yamlDoc struct {
	file string
	m    map[string]any
}

// NetworkSetting is terminal.network as configured for a profile.
type NetworkSetting struct {
	Mode sandbox.Network
	From string // the managed config.yaml that set it; "" for the default
}

// DefaultNetwork is terminal.network when the operator sets none: no
// network. A tenant's shell commands (and those of the catalog) need none:
// agentd itself, not the tools, reaches the providers; and the host's
// network is where the host's listeners (agentd's own, the providers,
// another tenant's servers) and abstract sockets are. An operator whose
// tenants need the network sets host.
const DefaultNetwork = sandbox.NetNone

// TerminalNetwork reads terminal.network from the managed (operator) scope;
// a profile's own value is consulted only when the managed scope sets none
// and the profile owns its operator keys (see OperatorOnly). A value that
// is neither none nor host is an error naming the file.
func (p Profile) TerminalNetwork() (NetworkSetting, error) {
	set, err := p.operatorTerminal("network")
	if err != nil {
		return NetworkSetting{}, err
	}
	if len(set) == 0 {
		return NetworkSetting{Mode: DefaultNetwork}, nil
	}
	d := set[0] // the managed scope's value, when it sets one, wins
	s, isString := d.raw.(string)
	if !isString {
		return NetworkSetting{}, fmt.Errorf("%w: %s: terminal.network: %v is not a string (want none or host)", ErrBadConfig, d.file, d.raw)
	}
	n, err := sandbox.ParseNetwork(s, DefaultNetwork)
	if err != nil {
		return NetworkSetting{}, fmt.Errorf("%w: %s: terminal.network: %v", ErrBadConfig, d.file, err)
	}
	return NetworkSetting{Mode: n, From: d.file}, nil
}

// places are a profile's folders and its neighbours', real paths.
type places struct {
	home, launch, profiles string
	roots                  []string // p's expanded workdir roots
	rootParents            []string // the folders holding every profile's root (a template's part before {profile})
	rootsFrom              string
}

func (p Profile) places() (places, error) {
	launch := p.Home
	if p.Name != LaunchName {
		launch = filepath.Dir(filepath.Dir(p.Home)) // <launch>/profiles/<name>
	}
	pl := places{home: realOrClean(p.Home), launch: realOrClean(launch), profiles: realOrClean(filepath.Join(launch, "profiles"))}
	roots, templates, err := p.WorkdirRoots()
	if err != nil {
		return places{}, err
	}
	pl.roots = roots
	if p.Managed != "" {
		pl.rootsFrom = filepath.Join(p.Managed, "config.yaml")
	}
	for _, t := range templates {
		if i := strings.Index(t, ProfileVar); i >= 0 {
			pl.rootParents = append(pl.rootParents, realOrClean(filepath.Dir(t[:i]+"x")))
		}
	}
	return pl, nil
}

// CheckWorkdir judges cwd as p's working directory and returns its real
// path (every symlink resolved). It must lie in p's home, or beneath one of
// p's workdir roots (WorkdirRoots), and be none of: another profile's home
// or workdir, the folder holding the homes or the workdir roots, a system
// folder (sandbox.SystemRule: /proc, /sys, /dev, /run, /usr, /etc, and /,
// /tmp, /var/tmp, /var, /home, ... themselves). A refusal wraps
// sandbox.ErrWorkdirRefused and names the rule.
func (p Profile) CheckWorkdir(cwd string) (string, error) {
	refuse := func(format string, a ...any) (string, error) {
		return "", fmt.Errorf("%w: terminal.cwd %s of profile %q: %s", sandbox.ErrWorkdirRefused, cwd, p.Name, fmt.Sprintf(format, a...))
	}
	if !filepath.IsAbs(cwd) {
		return refuse("not an absolute path")
	}
	real, err := resolve(filepath.Clean(cwd))
	if err != nil {
		return refuse("it cannot be resolved: %v", err)
	}
	pl, err := p.places()
	if err != nil {
		return "", fmt.Errorf("judge terminal.cwd of profile %q: %w", p.Name, err)
	}
	if within(real, pl.profiles) && (p.Name == LaunchName || !within(real, pl.home)) {
		if real == pl.profiles {
			return refuse("it is the folder of every named profile's home (%s)", real)
		}
		other, _, _ := strings.Cut(strings.TrimPrefix(real, pl.profiles+"/"), "/")
		return refuse("it is in another profile's home (profile %q)", other)
	}
	if p.Name != LaunchName && within(real, pl.launch) && !within(real, pl.home) {
		return refuse("it is in another profile's home (the launch profile's, %s)", pl.launch)
	}
	if within(pl.launch, real) && real != pl.launch || within(pl.home, real) && real != pl.home {
		return refuse("it holds the agentd homes (%s is beneath it)", pl.launch)
	}
	if within(real, pl.home) {
		return real, nil
	}
	if why := sandbox.SystemRule(real); why != "" {
		return refuse("%s", why)
	}
	for _, r := range pl.roots {
		if within(real, r) {
			return real, nil
		}
	}
	for _, parent := range pl.rootParents {
		if within(parent, real) {
			return refuse("it holds every profile's workdir root (%s)", parent)
		}
		if within(real, parent) {
			return refuse("it is in another profile's workdir root (beneath %s, not %s)", parent, strings.Join(pl.roots, ", "))
		}
	}
	if len(pl.roots) == 0 {
		return refuse("it is not in the profile's home %s, and the operator declared no workdir roots (terminal.workdir_roots in %s)", pl.home, pl.rootsFrom)
	}
	return refuse("it is not in the profile's home %s or its workdir roots (%s)", pl.home, strings.Join(pl.roots, ", "))
}

// resolve is path with every symlink resolved; a part that does not exist
// yet (a folder the shell would fail to enter) is kept as it is, after its
// resolved parent.
func resolve(path string) (string, error) {
	real, err := filepath.EvalSymlinks(path)
	if _, lerr := os.Lstat(path); errors.Is(err, fs.ErrNotExist) && errors.Is(lerr, fs.ErrNotExist) && path != "/" {
		parent, err := resolve(filepath.Dir(path))
		if err != nil {
			return "", err
		}
		return filepath.Join(parent, filepath.Base(path)), nil
	}
	return real, err
}

// realOrClean is path with its symlinks resolved, or cleaned when it
// cannot be (a root not made yet).
func realOrClean(path string) string {
	if r, err := filepath.EvalSymlinks(path); err == nil {
		return r
	}
	return filepath.Clean(path)
}
