// The Manager's host's life: starting it (lazily, within the restart
// budget), watching it, reaping and stopping it, and loading its plugins.

package host

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/internal/outerenv"
	"github.com/tenantcanary/tenantcanary/internal/proc"
	"github.com/tenantcanary/tenantcanary/isolation"
	"github.com/tenantcanary/tenantcanary/plugin/pluginload"
)

func (m *Manager) ensure(ctx context.Context) (*hostProc, error) {
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, fmt.Errorf("plugin host for profile %s: %w", m.cfg.Profile, ErrClosed)
		}
		if h := m.cur; h != nil {
			m.mu.Unlock()
			if h.conn.broken() == nil {
				return h, nil
			}
			// Dying, not yet reaped: wait for the monitor, then restart.
			select {
			case <-h.dead:
				m.mu.Lock()
				if m.cur == h { // it died before it was made current
					m.cur = nil
				}
				m.mu.Unlock()
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("wait for the %s to be reaped: %w", h.desc, ctx.Err())
			}
		}
		if ch := m.starting; ch != nil {
			m.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("wait for the plugin host for profile %s to start: %w", m.cfg.Profile, ctx.Err())
			}
		}
		now := time.Now()
		recent := m.deaths[:0:0]
		for _, d := range m.deaths {
			if now.Sub(d) < m.cfg.DeathWindow {
				recent = append(recent, d)
			}
		}
		m.deaths = recent
		if len(recent) >= m.cfg.MaxDeaths {
			err := fmt.Errorf("plugin host for profile %s died %d times in %v (last: %v); not restarting: %w",
				m.cfg.Profile, len(recent), m.cfg.DeathWindow, m.lastErr, ErrBudgetExhausted)
			m.mu.Unlock()
			return nil, err
		}
		var wait time.Duration
		if n := len(recent); n > 0 {
			wait = time.Until(recent[n-1].Add(m.cfg.Backoff(n)))
		}
		ch := make(chan struct{})
		m.starting = ch
		m.mu.Unlock()

		h, err := m.startAfter(ctx, wait)

		m.mu.Lock()
		m.starting = nil
		close(ch)
		if err == nil {
			if m.closed {
				m.mu.Unlock()
				m.stop(h)
				return nil, fmt.Errorf("plugin host for profile %s: %w", m.cfg.Profile, ErrClosed)
			}
			m.cur = h
		}
		m.mu.Unlock()
		if err == nil {
			return h, nil
		}
		if h != nil && errors.Is(err, ErrUnavailable) && ctx.Err() == nil {
			// It died while loading: the death is counted and the plugin
			// that was loading quarantined; try again within the budget.
			<-h.dead
			continue
		}
		return nil, err
	}
}

func (m *Manager) startAfter(ctx context.Context, wait time.Duration) (*hostProc, error) {
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, fmt.Errorf("wait to restart the plugin host for profile %s: %w", m.cfg.Profile, ctx.Err())
		}
	}
	// Starting is shared by every waiting caller, so one caller's short
	// deadline does not cut it short: StartTimeout bounds it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.StartTimeout)
	defer cancel()
	h, err := m.spawn(ctx)
	if err != nil {
		return nil, err
	}
	if err := m.load(ctx, h); err != nil {
		if !errors.Is(err, ErrUnavailable) {
			h.mu.Lock()
			loading, loaded := h.loading, h.loaded
			h.mu.Unlock()
			if errors.Is(err, ErrTimeout) && loading != "" && !loaded {
				m.mu.Lock()
				m.quarantined[loading] = fmt.Sprintf("plugin %s did not finish loading within %v; not reloaded", loading, m.cfg.StartTimeout)
				m.mu.Unlock()
			}
			m.stop(h)
		}
		return h, err
	}
	return h, nil
}

func (m *Manager) spawn(ctx context.Context) (*hostProc, error) {
	m.mu.Lock()
	m.gen++
	gen := m.gen
	m.mu.Unlock()
	env := m.processEnv()
	// The host outlives the start: ctx bounds the hello only.
	p, err := proc.Start(context.WithoutCancel(ctx), proc.Spec{
		Name: "plugin host for profile " + m.cfg.Profile, Argv: m.cfg.Command, Dir: m.cfg.Home,
		Env:   env,
		Stdin: true, RawStdout: true, Stderr: m.cfg.Log, Tree: true,
		// A process the host left holding its stderr must not hold the reaping.
		OutputGrace: 2 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("start plugin host for profile %s: %v: %w", m.cfg.Profile, err, ErrUnavailable)
	}
	stdout := p.Stdout()
	h := &hostProc{gen: gen, p: p, pgid: p.Pid(), pid: p.Pid(), started: env, dead: make(chan struct{})}
	h.desc = fmt.Sprintf("plugin host for profile %s (pid %d)", m.cfg.Profile, h.pid)
	m.mu.Lock()
	m.procs[h] = true
	m.mu.Unlock()

	// The hello comes first, within the start deadline.
	br := bufio.NewReaderSize(stdout, 64<<10)
	herr := p.Handshake(ctx, func() error {
		line, err := readFrame(br, DefaultMaxFrame)
		if err != nil {
			return fmt.Errorf("read hello: %w", err)
		}
		var f Frame
		var hb helloBody
		if err := json.Unmarshal(line, &f); err != nil || f.Op != opHello {
			return fmt.Errorf("first frame %.80q is not a hello: %w", line, ErrProtocol)
		}
		if err := json.Unmarshal(f.Body, &hb); err != nil || hb.Protocol != ProtocolVersion {
			return fmt.Errorf("hello names protocol %d, want %d: %w", hb.Protocol, ProtocolVersion, ErrProtocol)
		}
		if hb.PID > 0 {
			h.pid = hb.PID
		}
		return nil
	})
	if herr != nil {
		if errors.Is(herr, proc.ErrNotReady) {
			herr = fmt.Errorf("no hello: %w", ctx.Err())
		}
		<-p.Done() // Handshake killed it
		_ = stdout.Close()
		m.forget(h)
		close(h.dead)
		return nil, fmt.Errorf("start plugin host for profile %s (exit: %v): %w", m.cfg.Profile, p.ExitErr(), herr)
	}
	if h.pid != p.Pid() {
		// The process started is a launcher or a keeper, and the host in a
		// PID namespace of its own says the pid it sees there: name both,
		// the first as the machine sees it.
		h.desc = fmt.Sprintf("plugin host for profile %s (pid %d; pid %d as it sees itself)", m.cfg.Profile, p.Pid(), h.pid)
	} else {
		h.desc = fmt.Sprintf("plugin host for profile %s (pid %d)", m.cfg.Profile, h.pid)
	}
	h.conn = newConn(h.desc, br, p.Stdin(), m.cfg.MaxFrame, func(f *Frame) { m.serveHost(h, f) })
	h.conn.readEnd = func(error) { go m.monitor(h) }
	if stdout.SetReadDeadline(time.Time{}) == nil {
		// A caller reads its own reply (no hand-off from a reader
		// goroutine); a read deadline bounds its wait.
		h.conn.useLeader(stdout.SetReadDeadline)
	}
	// A host that stops reading its stdin (hung, stopped) breaks the
	// connection at a write deadline; kill it so the monitor reaps it.
	h.conn.afterFail = func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if !h.stopping && !h.reaped {
			h.kill()
		}
	}
	h.conn.start()
	return h, nil
}

// kill ends the host's whole tree: its process group, and every process
// below it however it left the group (setsid, a double fork under the
// keeper). It does not wait; once the host is reaped it signals nothing
// (its pid may name another process).
func (h *hostProc) kill() { h.p.Abort() }

// exitGrace is how long a host whose stream ended may take to exit on its
// own before its tree is killed.
const exitGrace = 2 * time.Second

func (m *Manager) forget(h *hostProc) {
	m.mu.Lock()
	delete(m.procs, h)
	m.mu.Unlock()
}

// monitor reaps a host whose stream ended: it kills its group, records the
// death (and quarantines the plugin that was loading), then fails every
// call in flight with an error naming the host.
func (m *Manager) monitor(h *hostProc) {
	h.mu.Lock()
	stopping := h.stopping
	h.mu.Unlock()
	if !stopping {
		// Its stream ended unasked: the host is dead or broken. Its
		// keeper exits right after it, having killed what it left, with
		// its status; a keeper that does not is killed with its tree. A
		// host being stopped gets its grace period in stop instead.
		t := time.NewTimer(exitGrace)
		select {
		case <-h.p.Exited():
		case <-t.C:
			h.kill()
		}
		t.Stop()
	}
	<-h.p.Done()
	_ = h.p.Stdout().Close() // read to its end: the conn stopped reading
	werr := h.p.ExitErr()
	h.mu.Lock()
	h.reaped = true
	stopping, loading, loaded, killedFor := h.stopping, h.loading, h.loaded, h.killedFor
	h.mu.Unlock()
	why := h.p.Diagnose()
	if killedFor != "" {
		why = killedFor
	} else {
		if c := h.lastCall.Load(); c != nil {
			why += "; the last call was: " + *c
		}
	}
	err := fmt.Errorf("%s exited (%s): %w", h.desc, why, ErrUnavailable)
	if !stopping {
		fmt.Fprintf(m.cfg.Log, "agentd: %s exited (%s); the next call starts a new host\n", h.desc, why)
	}
	m.mu.Lock()
	if m.cur == h {
		m.cur = nil
	}
	if !stopping && !m.closed {
		m.deaths = append(m.deaths, time.Now())
		m.lastErr = err
		if !loaded && loading != "" {
			m.quarantined[loading] = fmt.Sprintf("plugin %s killed its plugin host while loading (%v); not reloaded", loading, werr)
		}
	}
	delete(m.procs, h)
	m.mu.Unlock()
	h.conn.fail(err)
	h.conn.wait()
	close(h.dead)
}

// stop ends one host: close its stdin (it exits on EOF), then kill its
// group if it lingers.
func (m *Manager) stop(h *hostProc) {
	if h.conn == nil {
		return // never got past its hello; spawn reaped it
	}
	h.mu.Lock()
	h.stopping = true
	h.mu.Unlock()
	h.conn.fail(fmt.Errorf("%s: %w", h.desc, ErrClosed))
	t := time.NewTimer(m.cfg.StopGrace)
	defer t.Stop()
	select {
	case <-h.dead:
	case <-t.C:
		h.mu.Lock()
		if !h.reaped {
			h.kill()
		}
		h.mu.Unlock()
		<-h.dead
	}
}

// Close stops the host and every host still being reaped; no host process
// survives it. It is safe to call twice.
func (m *Manager) Close() error {
	m.mu.Lock()
	m.closed = true
	starting := m.starting
	m.mu.Unlock()
	if starting != nil {
		<-starting
	}
	m.mu.Lock()
	procs := make([]*hostProc, 0, len(m.procs))
	for h := range m.procs {
		procs = append(procs, h)
	}
	m.cur = nil
	m.mu.Unlock()
	for _, h := range procs {
		m.stop(h)
	}
	return nil
}

func (m *Manager) load(ctx context.Context, h *hostProc) error {
	found, err := m.plugins().discover()
	if err != nil {
		return fmt.Errorf("load plugins into the %s: %w", h.desc, err)
	}
	m.mu.Lock()
	var send []pluginload.Found
	var skipped []PluginStatus
	for _, f := range found {
		if why, bad := m.quarantined[f.Name]; bad {
			skipped = append(skipped, PluginStatus{Name: f.Name, Kind: f.Kind, Dir: f.Dir, Error: why})
			continue
		}
		send = append(send, f)
	}
	m.mu.Unlock()
	raw, err := h.conn.request(ctx, &Frame{Op: opLoad, Body: mustJSON(loadBody{Gen: h.gen, Plugins: send, Limits: m.cfg.Limits, Env: m.cfg.Env, Started: h.started})}, "")
	if err != nil {
		return fmt.Errorf("load plugins into the %s: %w", h.desc, err)
	}
	var r loadReply
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("load plugins into the %s: %v: %w", h.desc, err, ErrProtocol)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.loaded = true
	h.plugins = append(r.Plugins, skipped...)
	h.tools, h.hooks, h.providers = map[string]ToolSpec{}, map[string][]Ref{}, map[string]ProviderSpec{}
	known := map[string]ToolSpec{}
	defer func() {
		m.mu.Lock()
		m.known = known
		m.mu.Unlock()
	}()
	for _, p := range r.Plugins {
		for _, t := range p.Tools {
			h.tools[t.Name] = t
			known[t.Name] = t
		}
		for _, hk := range p.Hooks {
			h.hooks[hk.Event] = append(h.hooks[hk.Event], hk.Ref)
		}
		for _, pr := range p.Providers {
			h.providers[pr.Kind+"/"+pr.Name] = pr
		}
	}
	return nil
}

// processEnv is hostEnv of m's configuration.
func (m *Manager) processEnv() []string {
	return hostEnv(m.cfg.Env, m.cfg.OwnPIDNamespace, m.cfg.TrustProfileEnv, m.cfg.EnvOutside)
}

// hostEnv is the environment of a host's process, and so of the launcher
// that starts it outside its sandbox: outerenv's allow-list of agentd's
// own, then the markers agentd sets by design for the host program
// (isolation.HostProcessEnv=1: it is a host and loads plugins directly;
// keeperEnv=pid-namespace: its launcher's PID namespace does the keeper's
// work). The profile's environment (env) reaches the host only over the
// protocol (see applyEnv).
//
// A profile's .env is the tenant's own file: a line
// AGENTD_PLUGIN_HOST_KEEPER=inner in it would otherwise tell its host that
// it needs no keeper, and whatever the tenant's plugin started would
// outlive the host. trust is the host-env-trusted fault: the profile's
// values of the markers are kept, and win. outside is the launcher-env
// fault: env is the process's environment, as it was before issue 46.
//
// The home's path (homeVars) passes too: agentd sets it after the
// profile's .env (profile.ToolEnv), so it is the server's value, never the
// tenant's, and it names the host's profile to whoever lists processes
// (the operator, the harness).
// homeVars are the variables holding the profile's home that agentd sets
// itself (after the profile's .env) in every host's environment.
var homeVars = map[string]bool{"HOME": true, "AGENTD_HOME": true}

func hostEnv(env []string, ownPIDNamespace, trust, outside bool) []string {
	out := outerenv.Own()
	set := map[string]bool{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		marker := k == keeperEnv || k == isolation.HostProcessEnv
		switch {
		case marker && trust:
			set[k] = true
		case homeVars[k]:
		case marker, !outside:
			continue
		}
		out = append(out, kv)
	}
	if !set[isolation.HostProcessEnv] {
		out = append(out, isolation.HostProcessEnv+"=1")
	}
	if ownPIDNamespace && !set[keeperEnv] {
		out = append(out, keeperEnv+"="+keeperPIDNamespace)
	}
	return out
}
