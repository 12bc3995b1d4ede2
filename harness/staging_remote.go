package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/tenantcanary/tenantcanary/harness/remote"
	"github.com/tenantcanary/tenantcanary/internal/placeholder"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// RemoteFiles reports whether the target is a running server whose homes
// the harness reaches through its remote: block (pull and push).
func (t *Target) RemoteFiles() bool { return t.URL != "" && t.Reach.Files() }

// HomesReachable reports whether the harness reads and writes the
// target's homes: its own sandbox's, or a running server's through its
// remote: block.
func (t *Target) HomesReachable() bool { return t.Files && (!t.Remote() || t.RemoteFiles()) }

// RemoteRestarts reports whether the target is a running server the
// harness stops and starts through its remote: block.
func (t *Target) RemoteRestarts() bool { return t.URL != "" && t.Reach.CanRestart() }

// RemoteLacks says which remote: field would let the harness do what
// ("files", "restart", "processes", "reload") on a running server, or ""
// when the target gives it (or is no running server).
func (t *Target) RemoteLacks(what string) string {
	if t.URL == "" {
		return ""
	}
	return t.Reach.Lacks(what)
}

// validateRemote checks the remote: block: only for a running server, and
// a home to mirror implies the files.
func (t *Target) validateRemote() []error {
	if t.Reach == nil {
		return nil
	}
	var errs []error
	if t.URL == "" {
		errs = append(errs, errors.New("remote: reaches a running server, and the target gives no url (the harness starts its server itself)"))
	}
	if err := t.Reach.Validate(); err != nil {
		errs = append(errs, err)
	}
	if t.Reach.Files() {
		t.Files = true
		// Its agent CLI runs on the server's host through the operator's
		// transport, which forwards no environment: a command that names
		// neither would run on the runner's own home instead.
		for _, c := range []struct {
			field string
			argv  []string
		}{{"stdio", t.Stdio}, {"cron_tick", t.CronTick}} {
			if len(c.argv) > 0 && !slices.ContainsFunc(c.argv, namesHome) {
				errs = append(errs, fmt.Errorf("%s: %q names neither {env} nor {home}: a running server's %s runs on its host through the operator's transport (`ssh HOST env {env} agentd tui`), which forwards no environment", c.field, strings.Join(c.argv, " "), c.field))
			}
		}
	}
	return errs
}

// namesHome reports whether a command-line argument names {env} or {home}.
func namesHome(a string) bool {
	return slices.ContainsFunc(placeholder.Names(a), func(n string) bool { return n == "env" || n == "home" })
}

// mirror is the local mirror of a running server's home folder: the
// sandbox's home folder (the launch home and the profiles inside it).
// The caller holds mirrorMu.
func (s *Sandbox) mirror() *remote.Mirror {
	if s.remoteHome == nil {
		s.remoteHome = &remote.Mirror{Spec: s.Target.Reach, Local: s.Set.Home}
	}
	return s.remoteHome
}

// PullHomes makes the sandbox's homes what the running server's host
// holds (Target.RemoteFiles): every scan reads them after a pull. A
// target whose homes are the sandbox's own has nothing to pull.
func (s *Sandbox) PullHomes(ctx context.Context) error {
	if !s.Target.RemoteFiles() {
		return nil
	}
	s.mirrorMu.Lock()
	defer s.mirrorMu.Unlock()
	return s.mirror().Pull(ctx)
}

// PushHomes sends the sandbox's homes to the running server's host: what
// the harness wrote there (a home, a plugin) reaches the server.
func (s *Sandbox) PushHomes(ctx context.Context) error {
	if !s.Target.RemoteFiles() {
		return nil
	}
	s.mirrorMu.Lock()
	defer s.mirrorMu.Unlock()
	return s.mirror().Push(ctx)
}

// RemotePath is where path, a path in the sandbox's homes or in a mirror
// of a shared folder (PullShared), lies on the running server's host
// (path itself for a target whose homes are the sandbox's).
func (s *Sandbox) RemotePath(path string) string {
	if !s.Target.RemoteFiles() {
		return path
	}
	s.mirrorMu.Lock()
	defer s.mirrorMu.Unlock()
	for _, m := range s.remoteShared {
		if r := m.RemotePath(path); r != path {
			return r
		}
	}
	return s.mirror().RemotePath(path)
}

// PullShared pulls every folder of remote.shared (the running server's
// working folder, its TMPDIR: folders no tenant owns) into mirrors of
// its own in the sandbox, and returns their local paths, in
// remote.shared's order: the shared-place check scans them.
func (s *Sandbox) PullShared(ctx context.Context) ([]string, error) {
	sp := s.Target.Reach
	if !s.Target.RemoteFiles() || len(sp.Shared) == 0 {
		return nil, nil
	}
	s.mirrorMu.Lock()
	defer s.mirrorMu.Unlock()
	if s.remoteShared == nil {
		for i, folder := range sp.Shared {
			s.remoteShared = append(s.remoteShared, &remote.Mirror{Spec: sp.WithHome(folder), Local: filepath.Join(s.Root, "remote-shared", strconv.Itoa(i))})
		}
	}
	var out []string
	for _, m := range s.remoteShared {
		if err := m.Pull(ctx); err != nil {
			return nil, fmt.Errorf("pull the shared folder %s: %w", m.Spec.Home, err)
		}
		out = append(out, m.Local)
	}
	return out, nil
}

// plantRemote plants the tenants' homes on a running server's host: the
// folder is pulled (the server's state stays), the homes written over it
// in the mirror, and the mirror pushed.
func (s *Sandbox) plantRemote(ctx context.Context, extras tenants.HomeExtras) error {
	if err := s.PullHomes(ctx); err != nil {
		return fmt.Errorf("plant homes: %w", err)
	}
	s.pushCtx = ctx
	defer func() { s.pushCtx = nil }()
	for _, t := range s.Set.Tenants {
		if err := s.WriteHome(t, extras); err != nil {
			return err
		}
	}
	if err := s.pushWritten(); err != nil {
		return err
	}
	// The server may hold what it read of the homes these replace (a
	// profile of the same name, planted by an earlier scenario): its own
	// reload makes it read them anew.
	if err := s.reloadRemote(ctx); err != nil {
		return fmt.Errorf("plant homes: %w", err)
	}
	return nil
}

// reloadRemote runs the server's own reload (remote.reload), when the
// target declares one.
func (s *Sandbox) reloadRemote(ctx context.Context) error {
	if len(s.Target.Reach.Reload) == 0 {
		return nil
	}
	_, err := remote.Run(ctx, "remote.reload", s.Target.Reach.Reload, s.Target.Reach.Home, nil, nil)
	return err
}

// pushWritten pushes the homes after the harness wrote one (WriteHome):
// within the context of the plant that writes them all, once at its end;
// otherwise at once, within the sandbox's call time.
func (s *Sandbox) pushWritten() error {
	if !s.Target.RemoteFiles() {
		return nil
	}
	ctx := s.pushCtx
	if ctx == nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(s.ctx, s.Target.TimesFor(0).Call)
		defer cancel()
	}
	if err := s.PushHomes(ctx); err != nil {
		return fmt.Errorf("push the homes written: %w", err)
	}
	return nil
}

// ReloadPlugins pushes the homes and runs the server's own plugin reload
// (remote.reload) after a plugin's files were written for a running
// server; nothing for a target whose homes are the sandbox's.
func (s *Sandbox) ReloadPlugins(ctx context.Context) error {
	if !s.Target.RemoteFiles() {
		return nil
	}
	if err := s.PushHomes(ctx); err != nil {
		return fmt.Errorf("install plugin: %w", err)
	}
	if err := s.reloadRemote(ctx); err != nil {
		return fmt.Errorf("install plugin: %w", err)
	}
	return nil
}

// StopRemote stops a running server through remote.stop and waits, within
// ctx, until its health URL no longer answers.
func (s *Sandbox) StopRemote(ctx context.Context) error {
	return s.switchRemote(ctx, "stop", false)
}

// StartRemote starts a running server again through remote.start and
// waits, within ctx, until its health URL answers.
func (s *Sandbox) StartRemote(ctx context.Context) error {
	return s.switchRemote(ctx, "start", true)
}

// switchRemote runs remote.stop or remote.start (verb) and waits for the
// health URL to answer (up) or to go quiet.
func (s *Sandbox) switchRemote(ctx context.Context, verb string, up bool) error {
	sp := s.Target.Reach
	if !s.Target.RemoteRestarts() {
		return fmt.Errorf("%s the server: %s", verb, s.Target.RemoteLacks("restart"))
	}
	argv := sp.Stop
	if up {
		argv = sp.Start
	}
	if _, err := remote.Run(ctx, "remote."+verb, argv, sp.Home, nil, nil); err != nil {
		return fmt.Errorf("%s the server: %w", verb, err)
	}
	if err := remote.WaitHealth(ctx, sp.HealthURL(s.Target.URL), up); err != nil {
		return fmt.Errorf("%s the server: %w", verb, err)
	}
	// A running gateway on the same host starts with the server: the
	// gateway family's next call must find it ready, not refused.
	if up {
		if err := s.Target.AwaitGateway(ctx); err != nil {
			return fmt.Errorf("%s the server: %w", verb, err)
		}
	}
	return nil
}

// GatewayReadyURL is a running gateway's ready URL: gateway_url and
// llm_gateway.ready_path, "" when the target gives either not.
func (t *Target) GatewayReadyURL() string {
	if t.GatewayURL == "" || t.LLMGateway == nil || t.LLMGateway.ReadyPath == "" {
		return ""
	}
	return strings.TrimRight(t.GatewayURL, "/") + t.LLMGateway.ReadyPath
}

// AwaitGateway waits, within ctx, until a running gateway's ready path
// answers 200 (GatewayReadyURL; nothing to wait for without one): it may
// still be starting after a restart (remote.start).
func (t *Target) AwaitGateway(ctx context.Context) error {
	u := t.GatewayReadyURL()
	if u == "" {
		return nil
	}
	if err := remote.WaitHealth(ctx, u, true); err != nil {
		return fmt.Errorf("the gateway at gateway_url is not ready (llm_gateway.ready_path): %w", err)
	}
	return nil
}

// RemoteProcesses lists a running server's processes through
// remote.processes.
func (s *Sandbox) RemoteProcesses(ctx context.Context) ([]remote.Process, error) {
	if why := s.Target.RemoteLacks("processes"); why != "" || s.Target.URL == "" {
		return nil, fmt.Errorf("list the server's processes: %s", why)
	}
	return remote.List(ctx, s.Target.Reach.Processes)
}

// withRemoteTenants is opts for the tenants of a running server the
// harness plants its own tenants on (remote.Spec.OwnTenants): their
// workdirs in remote.workdirs on its host, made there by a push, and
// their providers where the server reaches them. Other targets' opts
// are returned as they are.
func withRemoteTenants(ctx context.Context, t Target, root string, opts tenants.Options) tenants.Options {
	sp := t.Reach
	if t.URL == "" || !sp.OwnTenants() {
		return opts
	}
	opts.WorkRoot = sp.Workdirs
	if sp.ProvidersListen != "" {
		opts.ProviderAddr = sp.ProvidersListen
	}
	if sp.ProvidersHost != "" {
		opts.AdvertiseHost = sp.ProvidersHost
	}
	scratch := filepath.Join(root, "remote-workdirs")
	var mu sync.Mutex
	opts.MakeWorkdir = func(dir string) error {
		mu.Lock()
		defer mu.Unlock()
		rel, err := filepath.Rel(sp.Workdirs, dir)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
			return fmt.Errorf("workdir %s is not inside remote.workdirs %s", dir, sp.Workdirs)
		}
		// An empty folder tree of the one workdir, pushed to the folder.
		_ = os.RemoveAll(scratch)
		if err := os.MkdirAll(filepath.Join(scratch, rel), 0o755); err != nil {
			return fmt.Errorf("make workdir %s: %w", dir, err)
		}
		defer os.RemoveAll(scratch)
		spec := *sp
		spec.Home = sp.Workdirs
		cctx, cancel := context.WithTimeout(ctx, t.TimesFor(0).Call)
		defer cancel()
		if err := (&remote.Mirror{Spec: &spec, Local: scratch}).Push(cctx); err != nil {
			return fmt.Errorf("make workdir %s on the server's host: %w", dir, err)
		}
		return nil
	}
	return opts
}
