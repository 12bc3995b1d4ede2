package profile

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
)

// SandboxSetting is terminal.sandbox as configured for a profile.
type SandboxSetting struct {
	Mode sandbox.Mode
	// Pinned reports that the managed (operator) scope set it: the
	// profile's own value was not consulted.
	Pinned bool
	// From is the file the value came from ("" when neither sets it and
	// the mode is the default, auto).
	From string
	// Ignored are the operator-only keys the profile's own config.yaml
	// set, which were ignored (terminal.sandbox among them, say).
	Ignored []IgnoredKey
}

// TerminalSandbox reads terminal.sandbox: the managed scope's value when it
// sets one (a profile cannot override it), else the profile's own when the
// profile owns its operator keys (see OperatorOnly), else auto. A value
// that is not a mode is an error naming the file and key.
func (p Profile) TerminalSandbox() (SandboxSetting, error) {
	managed, err := p.ManagedConfig()
	if err != nil {
		return SandboxSetting{}, err
	}
	own, ignored, err := p.OwnConfig()
	if err != nil {
		return SandboxSetting{}, err
	}
	scopes := []struct {
		file string
		doc  map[string]any
	}{{"", managed}, {p.File("config.yaml"), own}}
	if p.Managed != "" {
		scopes[0].file = filepath.Join(p.Managed, "config.yaml")
	}
	for i, sc := range scopes {
		term, _ := sc.doc["terminal"].(map[string]any)
		raw, ok := term["sandbox"]
		if !ok || raw == nil {
			continue
		}
		f := sc.file
		s, isString := raw.(string)
		if !isString {
			return SandboxSetting{}, fmt.Errorf("%w: %s: terminal.sandbox: %v is not a string (want auto, bwrap, landlock or none)", ErrBadConfig, f, raw)
		}
		mode, err := sandbox.ParseMode(s)
		if err != nil {
			return SandboxSetting{}, fmt.Errorf("%w: %s: terminal.sandbox: %v", ErrBadConfig, f, err)
		}
		return SandboxSetting{Mode: mode, Pinned: i == 0, From: f, Ignored: ignored}, nil
	}
	return SandboxSetting{Mode: sandbox.Auto, Ignored: ignored}, nil
}

// ErrWorkdirExposes is a working directory whose sandbox would show another
// profile's files (a sibling's home, the launch home, a folder above them).
var ErrWorkdirExposes = errors.New("workdir would expose another profile's files")

// SandboxPolicy is the sandbox of the profile's subprocesses in mode m
// (resolved already) with working directory cwd: its home read-write (the
// launch home without the profiles folder), cwd read-write when it is
// outside the home, the managed scope hidden when it lies in a system
// folder. A cwd in another profile's home, in the launch home (for a named
// profile) or above any home is refused (ErrWorkdirExposes) unless m is
// None.
func (p Profile) SandboxPolicy(m sandbox.Mode, cwd string, self []string) (sandbox.Policy, error) {
	pol := sandbox.Policy{Mode: m, Home: p.Home, Dir: cwd, Self: append([]string(nil), self...)}
	launch := p.Home
	if p.Name != LaunchName {
		launch = filepath.Dir(filepath.Dir(p.Home)) // <launch>/profiles/<name>
	}
	root := filepath.Join(launch, "profiles")
	if p.Name == LaunchName {
		pol.Hide = append(pol.Hide, root)
	}
	if p.Managed != "" {
		for _, d := range sandbox.SystemDirs {
			if within(p.Managed, d) {
				pol.Hide = append(pol.Hide, p.Managed)
			}
		}
	}
	if cwd == "" {
		pol.Dir = p.Home
		return pol, nil
	}
	cwd = filepath.Clean(cwd)
	switch {
	case m == sandbox.None: // nothing is confined: there is nothing to expose
		if !within(cwd, p.Home) {
			pol.Work = []string{cwd}
		}
	case within(cwd, root) && (p.Name == LaunchName || !within(cwd, p.Home)), within(root, cwd) && p.Name != LaunchName,
		within(cwd, launch) && !within(cwd, p.Home), within(launch, cwd) && cwd != launch:
		return sandbox.Policy{}, fmt.Errorf("terminal.cwd %s of profile %q: %w (want a folder in its home %s, or outside every agentd home)",
			cwd, p.Name, ErrWorkdirExposes, p.Home)
	case within(cwd, p.Home):
	default:
		pol.Work = []string{cwd}
	}
	return pol, nil
}

// within reports whether path is dir or beneath it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
