package profile

import (
	"fmt"
	"path/filepath"
	"slices"
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
// profile's files or the host's: sandbox.ErrWorkdirRefused.
var ErrWorkdirExposes = sandbox.ErrWorkdirRefused

// SandboxPolicy is the sandbox of the profile's subprocesses in mode m
// (resolved already) with working directory cwd: its home read-write (the
// launch home without the profiles folder), the managed scope hidden when
// it lies in a system folder, and cwd, judged by CheckWorkdir, read-write
// by its real path when it is outside the home. The policy's Allow (the
// real home and workdir roots) has the sandbox judge that workdir again
// when it binds it. In mode None nothing is confined and cwd is not judged.
func (p Profile) SandboxPolicy(m sandbox.Mode, cwd string, self []string) (sandbox.Policy, error) {
	pol := p.basePolicy(m, cwd, self)
	if cwd == "" {
		pol.Dir = p.Home
		return pol, nil
	}
	cwd = filepath.Clean(cwd)
	if m == sandbox.None { // nothing is confined: there is nothing to expose
		if !within(cwd, p.Home) {
			pol.Work = []string{cwd}
		}
		return pol, nil
	}
	real, err := p.CheckWorkdir(cwd)
	if err != nil {
		return sandbox.Policy{}, err
	}
	roots, _, err := p.WorkdirRoots()
	if err != nil {
		return sandbox.Policy{}, err
	}
	home := realOrClean(p.Home)
	pol.Allow = append([]string{home}, roots...)
	if rel, err := filepath.Rel(home, real); err == nil && within(real, home) {
		pol.Dir = filepath.Join(p.Home, rel) // bound with the home, by the home's path
		return pol, nil
	}
	pol.Dir, pol.Work = real, []string{real}
	return pol, nil
}

// WorkdirAnywherePolicy is SandboxPolicy as the workdir-anywhere fault has
// it: cwd judged not at all (the caller checked it is a folder) and bound
// by path, through any symlink: another profile's home or workdir, the
// folder of every home, a system folder.
func (p Profile) WorkdirAnywherePolicy(m sandbox.Mode, cwd string, self []string) (sandbox.Policy, error) {
	pol := p.basePolicy(m, cwd, self)
	pol.BindByPath = true
	if cwd == "" {
		pol.Dir = p.Home
		return pol, nil
	}
	cwd = filepath.Clean(cwd)
	if !within(cwd, p.Home) {
		pol.Work = []string{cwd}
	}
	// Nor is what the home hides (the launch home's profiles) hidden over
	// a workdir beneath it.
	pol.Hide = slices.DeleteFunc(pol.Hide, func(h string) bool { return within(cwd, h) })
	return pol, nil
}

// basePolicy is the policy without the workdir: the home, what it hides.
func (p Profile) basePolicy(m sandbox.Mode, cwd string, self []string) sandbox.Policy {
	pol := sandbox.Policy{Mode: m, Home: p.Home, Dir: cwd, Self: append([]string(nil), self...)}
	if p.Name == LaunchName {
		pol.Hide = append(pol.Hide, filepath.Join(p.Home, "profiles"))
	}
	if p.Managed != "" {
		for _, d := range sandbox.SystemDirs {
			if within(p.Managed, d) {
				pol.Hide = append(pol.Hide, p.Managed)
			}
		}
	}
	return pol
}

// within reports whether path is dir or beneath it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
