package server

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/rpc"
	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
	"github.com/tenantcanary/tenantcanary/agentd/scope"
)

// ErrTerminalRefused is a terminal a pooled server will not run: one of a
// profile other than the launch one with no sandbox, unless the operator
// allowed that.
var ErrTerminalRefused = errors.New("terminal refused")

// pooled reports whether the server serves many tenants in one process
// (serve, gateway, a cron tick): there an unconfined terminal of one
// profile would see every other profile.
func (s *Server) pooled() bool { return s.opts.Source != "tui" }

// shellSandbox is the sandbox of a terminal of sc's profile working in
// cwd: terminal.sandbox resolved (auto: bwrap, else landlock, else none).
// With none, a pooled server refuses the terminal of any profile but the
// launch one unless the managed scope itself says none.
func (s *Server) shellSandbox(sc *scope.Scope, cwd string) (*sandbox.Policy, error) {
	p := sc.Profile
	if s.opts.Faults.Has(faults.NoToolSandbox) {
		pol, err := p.SandboxPolicy(sandbox.None, cwd, s.opts.Self) // the bug: terminal.sandbox is ignored
		return &pol, err
	}
	set, err := p.TerminalSandbox()
	if err != nil {
		return nil, fmt.Errorf("terminal of profile %q: %w", p.Name, err)
	}
	mode, why, err := sandbox.Resolve(set.Mode)
	if err != nil {
		return nil, fmt.Errorf("terminal of profile %q: terminal.sandbox is %s (in %s) and it cannot run here: %w", p.Name, set.Mode, set.From, err)
	}
	if set.Mode == sandbox.None {
		why += " in " + set.From
	}
	if mode == sandbox.None && s.pooled() && p.Name != profile.LaunchName && !(set.Pinned && set.Mode == sandbox.None) {
		return nil, fmt.Errorf("%w for profile %q: it would run with no sandbox (%s), and a pooled agentd runs the terminal of a profile other than the launch one only in a sandbox; "+
			"see `agentd sandbox check`, or let the operator allow it with terminal.sandbox: none in %s",
			ErrTerminalRefused, p.Name, why, filepath.Join(p.Managed, "config.yaml"))
	}
	policy := p.SandboxPolicy
	if s.opts.Faults.Has(faults.WorkdirAnywhere) || s.opts.Faults.Has(faults.GlobalCwd) {
		// The bug: any folder, bound by path. global-cwd (one process-wide
		// cwd, no per-profile workdir at all) implies it, so its leak (a
		// shell in another tenant's workdir) stays observable.
		policy = p.WorkdirAnywherePolicy
	}
	pol, err := policy(mode, cwd, s.opts.Self)
	if err != nil {
		return nil, err
	}
	net, err := p.TerminalNetwork()
	if err != nil {
		return nil, fmt.Errorf("terminal of profile %q: %w", p.Name, err)
	}
	pol.Network = net.Mode
	pol.NoContain = s.opts.Faults.Has(faults.EscapedProcess)
	pol.EnvOutside = s.opts.Faults.Has(faults.LauncherEnv) // the bug: bwrap and the launcher run with the tenant's environment
	return &pol, nil
}

// checkCwd judges a config.set cwd for sc's profile: in a pooled server it
// must lie in the profile's home or its workdir roots (profile.CheckWorkdir),
// else error 4003 naming the rule. The workdir-anywhere fault checks only
// that it is a folder.
func (s *Server) checkCwd(sc *scope.Scope, cwd string) error {
	if !s.pooled() || s.opts.Faults.Has(faults.WorkdirAnywhere) {
		return nil
	}
	if _, err := sc.Profile.CheckWorkdir(cwd); err != nil {
		if errors.Is(err, sandbox.ErrWorkdirRefused) {
			return rpc.Errorf(rpc.CodeWorkdirRefused, "config.set: %v", err)
		}
		return rpc.Errorf(rpc.CodeInternal, "config.set: %v", err)
	}
	return nil
}
