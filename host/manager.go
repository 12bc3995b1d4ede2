// Over 600 lines: one supervisor (start, restart budget, reaping, calls) whose parts share hostProc's state and lock.

package host

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenantcanary/tenantcanary/internal/proc"
	"github.com/tenantcanary/tenantcanary/isolation"
	"github.com/tenantcanary/tenantcanary/plugin"
	"github.com/tenantcanary/tenantcanary/plugin/pluginload"
)

// Config describes one profile's plugin host.
type Config struct {
	// Profile names the profile in errors and logs.
	Profile string
	// Command is the host's argv: the launcher prefix (a sandbox runner,
	// isolation.Settings.Launcher) then the program, e.g.
	// [bwrap ... /proc/self/exe plugin-host].
	Command []string
	// Home is the profile's home: the host's working directory.
	Home string
	// Env is the host's whole environment: the profile's only.
	// isolation.HostProcessEnv=1 is added.
	Env []string
	// PluginsDir is the profile's plugins folder; Enabled, when not nil,
	// keeps only the plugins it names.
	PluginsDir string
	Enabled    []string
	// FollowLinks is agentd's seeded fault home-follows-links (test-only;
	// see homefs.Home.FollowLinks): the model-provider cache in Home is
	// read and written by plain path, following links. Never set it in a
	// server.
	FollowLinks bool
	// ExtractEnv is the whole environment of the one-shot child that
	// extracts model-provider profile data: it must hold no credentials
	// (default HOME=Home and this process's PATH only).
	ExtractEnv []string
	// Backend serves the plugins' DispatchTool and facade calls.
	Backend Backend
	// Log receives everything the host writes to stderr (what plugins
	// print). Nil discards it.
	Log io.Writer

	// CallTimeout bounds every call that has no earlier deadline
	// (default 30s, plugins.host.call_timeout). A call into the host that
	// runs past its deadline kills the host (its whole tree) so that the
	// plugin code stops; the next call starts a new one, and the death
	// counts against the restart budget. StartTimeout bounds starting and
	// loading (default 30s).
	CallTimeout  time.Duration
	StartTimeout time.Duration
	// MaxDeaths deaths within DeathWindow stop restarts (default 3 in 10m).
	MaxDeaths   int
	DeathWindow time.Duration
	// Backoff is the wait before a restart after the n-th recent death
	// (default: none after the first, then 250ms doubling).
	Backoff func(deaths int) time.Duration
	// MaxFrame limits one frame's size (default DefaultMaxFrame).
	MaxFrame int
	// StopGrace is how long a host stopped by Close may take to exit on
	// its own (it exits when its stdin closes) before its process group is
	// killed (default 5s).
	StopGrace time.Duration
	// Limits are the rlimits the host sets on itself before loading any
	// plugin (LimitsOf gives them from plugins.host settings).
	Limits Limits
	// KeepPastDeadline leaves a host whose call ran past its deadline
	// running (the call still fails). It exists for the positive control
	// of the deadline kill; never set it in a server.
	KeepPastDeadline bool
}

func defaultBackoff(n int) time.Duration {
	if n <= 1 {
		return 0
	}
	return 250 * time.Millisecond << (n - 2)
}

// Manager supervises one profile's plugin host: it starts it lazily, loads
// the profile's plugins into it, proxies calls, and restarts it within a
// budget when it dies. It is safe for concurrent use.
type Manager struct {
	cfg Config

	mu          sync.Mutex
	cur         *hostProc
	starting    chan struct{}
	gen         uint64
	deaths      []time.Time
	quarantined map[string]string
	closed      bool
	procs       map[*hostProc]bool
	lastErr     error
	// known are the tools the last host that loaded registered: with no
	// host (its restart budget spent) they stay listed, and calling one
	// fails with the reason.
	known map[string]ToolSpec
}

// hostProc is one generation of the host: one process and its connection.
type hostProc struct {
	gen     uint64
	desc    string
	p       *proc.Proc // the host's process: its group and tree
	pgid    int
	pid     int
	conn    *conn
	dead    chan struct{}
	exitErr error

	lastCall atomic.Pointer[string] // what was last asked of it

	mu        sync.Mutex
	killedFor string // why the manager killed it, if it did
	loading   string
	loaded    bool
	stopping  bool
	reaped    bool // waited for: its pid may be reused, never signal it
	plugins   []PluginStatus
	tools     map[string]ToolSpec
	hooks     map[string][]Ref
	providers map[string]ProviderSpec // kind "/" name
}

// New checks cfg and returns a Manager; nothing starts until first use.
func New(cfg Config) (*Manager, error) {
	if cfg.Profile == "" {
		return nil, errors.New("new plugin host manager: Config.Profile is empty")
	}
	if len(cfg.Command) == 0 {
		return nil, fmt.Errorf("new plugin host manager for %s: Config.Command is empty (want e.g. [agentd plugin-host])", cfg.Profile)
	}
	if cfg.Backend == nil {
		return nil, fmt.Errorf("new plugin host manager for %s: Config.Backend is nil", cfg.Profile)
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 30 * time.Second
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	if cfg.MaxDeaths <= 0 {
		cfg.MaxDeaths = 3
	}
	if cfg.DeathWindow <= 0 {
		cfg.DeathWindow = 10 * time.Minute
	}
	if cfg.Backoff == nil {
		cfg.Backoff = defaultBackoff
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 5 * time.Second
	}
	return &Manager{cfg: cfg, quarantined: map[string]string{}, procs: map[*hostProc]bool{}}, nil
}

// Start starts the host and loads the plugins, if that has not happened.
func (m *Manager) Start(ctx context.Context) error {
	_, err := m.ensure(ctx)
	return err
}

// PID is the live host's pid, or 0.
func (m *Manager) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == nil {
		return 0
	}
	return m.cur.pid
}

// PGID is the live host's process group (the launcher's, when there is
// one), or 0.
func (m *Manager) PGID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == nil {
		return 0
	}
	return m.cur.pgid
}

// Generation counts the hosts started so far; the live host has this one.
func (m *Manager) Generation() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen
}

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
	// The host outlives the start: ctx bounds the hello only.
	p, err := proc.Start(context.WithoutCancel(ctx), proc.Spec{
		Name: "plugin host for profile " + m.cfg.Profile, Argv: m.cfg.Command, Dir: m.cfg.Home,
		Env:   append(append([]string(nil), m.cfg.Env...), isolation.HostProcessEnv+"=1"),
		Stdin: true, RawStdout: true, Stderr: m.cfg.Log, Tree: true,
		// A process the host left holding its stderr must not hold the reaping.
		OutputGrace: 2 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("start plugin host for profile %s: %v: %w", m.cfg.Profile, err, ErrUnavailable)
	}
	stdout := p.Stdout()
	h := &hostProc{gen: gen, p: p, pgid: p.Pid(), pid: p.Pid(), dead: make(chan struct{})}
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
	h.desc = fmt.Sprintf("plugin host for profile %s (pid %d)", m.cfg.Profile, h.pid)
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
	found, err := pluginload.Discover(m.cfg.PluginsDir, m.cfg.Enabled)
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
	raw, err := h.conn.request(ctx, &Frame{Op: opLoad, Body: mustJSON(loadBody{Gen: h.gen, Plugins: send, Limits: m.cfg.Limits})}, "")
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

// serveHost answers the host's requests: loading notices, nested tool
// dispatch and facade calls, each run as the session of the call it is
// nested in.
func (m *Manager) serveHost(h *hostProc, f *Frame) {
	if f.ID == 0 {
		return
	}
	timeout := m.cfg.CallTimeout
	if f.TimeoutMS > 0 {
		timeout = min(timeout, time.Duration(f.TimeoutMS)*time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(withReadToken(context.Background(), f), timeout)
	defer cancel()
	if f.Op == opLoading {
		var b loadingBody
		err := decode(f, &b)
		if err == nil {
			h.mu.Lock()
			h.loading = b.Name
			h.mu.Unlock()
		}
		h.conn.reply(ctx, f.ID, nil, err)
		return
	}
	session := ""
	if f.Parent != 0 {
		s, ok := h.conn.sessionOf(f.Parent)
		if !ok {
			h.conn.reply(ctx, f.ID, nil, fmt.Errorf("nested %s names call %d, which is not in flight: %w", f.Op, f.Parent, ErrNotFound))
			return
		}
		session = s
	}
	ctx = plugin.WithSession(ctx, session)
	var out string
	var err error
	switch f.Op {
	case opDispatch:
		var b callBody
		if err = decode(f, &b); err == nil {
			out, err = m.cfg.Backend.DispatchTool(ctx, session, b.Tool, b.Args)
		}
	case opFacade:
		var b facadeBody
		if err = decode(f, &b); err == nil {
			out, err = m.cfg.Backend.Facade(ctx, session, b.Facade, b.Method, b.Args)
		}
	default:
		err = fmt.Errorf("operation %q: %w", f.Op, ErrUnsupported)
	}
	if err != nil {
		h.conn.reply(ctx, f.ID, nil, err)
		return
	}
	h.conn.reply(ctx, f.ID, resultBody{out}, nil)
}

// request sends one request to the live host (starting it if need be) and
// wraps every error with what was asked of which host.
func (m *Manager) request(ctx context.Context, what, op, session string, body any) (*hostProc, json.RawMessage, error) {
	h, err := m.ensure(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	raw, err := m.requestOn(ctx, h, what, op, session, body)
	return h, raw, err
}

func (m *Manager) requestOn(ctx context.Context, h *hostProc, what, op, session string, body any) (json.RawMessage, error) {
	b, err := encodeBody(body)
	if err != nil {
		return nil, fmt.Errorf("%s: arguments are not plain data: %w", what, err)
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	defer cancel()
	f := &Frame{Op: op, Session: session, Body: b}
	h.lastCall.Store(&what)
	var allowed time.Duration
	if dl, ok := ctx.Deadline(); ok {
		allowed = time.Until(dl)
		f.TimeoutMS = max(1, allowed.Milliseconds())
	}
	raw, err := h.conn.request(ctx, f, session)
	if err != nil {
		var we *Error
		if errors.Is(err, ErrTimeout) && !errors.As(err, &we) {
			// Not the plugin's own timeout error: the host did not answer.
			return nil, m.pastDeadline(h, what, allowed, err)
		}
		if errors.As(err, &we) {
			return nil, fmt.Errorf("%s in the %s: %w", what, h.desc, err)
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return raw, nil
}

// pastDeadline ends a host whose call ran past its deadline: the plugin
// code may still be running (a busy loop, an allocation), and only ending
// the process stops it. The error names the call, the host (so the
// profile) and the deadline.
func (m *Manager) pastDeadline(h *hostProc, what string, allowed time.Duration, err error) error {
	limit := fmt.Sprintf("its deadline of %v", allowed.Round(time.Millisecond))
	if allowed >= m.cfg.CallTimeout-time.Millisecond {
		limit = fmt.Sprintf("plugins.host.call_timeout (%v)", m.cfg.CallTimeout)
	}
	if m.cfg.KeepPastDeadline {
		return fmt.Errorf("%s in the %s: no answer within %s: %w", what, h.desc, limit, err)
	}
	h.mu.Lock()
	killed := false
	if !h.stopping && !h.reaped && h.killedFor == "" {
		h.killedFor = fmt.Sprintf("killed: %s ran past %s", what, limit)
		h.kill()
		killed = true
	}
	h.mu.Unlock()
	if killed {
		// Calls from now on wait for the restart rather than reach it.
		h.conn.fail(fmt.Errorf("%s: %s: %w", h.desc, h.killedFor, ErrUnavailable))
		fmt.Fprintf(m.cfg.Log, "agentd: %s: %s ran past %s; killed the host and everything it started\n", h.desc, what, limit)
	}
	return fmt.Errorf("%s in the %s: no answer within %s; the host was killed (a new one starts on the next call): %w",
		what, h.desc, limit, err)
}

// Plugins reports every discovered plugin and how loading it went in the
// live host (starting it if need be).
func (m *Manager) Plugins(ctx context.Context) ([]PluginStatus, error) {
	h, err := m.ensure(ctx)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]PluginStatus(nil), h.plugins...), nil
}

// Tools lists the tools of the plugins loaded in the host. When the host
// cannot run because its restart budget is spent, it returns the tools the
// last host had with the error (wrapping ErrBudgetExhausted): a caller keeps
// them listed, and calling one fails with the reason.
func (m *Manager) Tools(ctx context.Context) ([]ToolSpec, error) {
	ps, err := m.Plugins(ctx)
	if err != nil {
		if errors.Is(err, ErrBudgetExhausted) {
			m.mu.Lock()
			out := make([]ToolSpec, 0, len(m.known))
			for _, t := range m.known {
				out = append(out, t)
			}
			m.mu.Unlock()
			sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
			return out, err
		}
		return nil, err
	}
	var out []ToolSpec
	for _, p := range ps {
		out = append(out, p.Tools...)
	}
	return out, nil
}

// Call runs a plugin tool in the host as session.
func (m *Manager) Call(ctx context.Context, session, tool string, args map[string]any) (string, error) {
	what := "call tool " + tool
	h, err := m.ensure(ctx)
	if err != nil {
		m.mu.Lock()
		spec, ok := m.known[tool]
		m.mu.Unlock()
		if ok {
			what = fmt.Sprintf("call tool %s of plugin %s", tool, spec.Plugin)
		}
		return "", fmt.Errorf("%s: %w", what, err)
	}
	h.mu.Lock()
	spec, ok := h.tools[tool]
	h.mu.Unlock()
	if !ok {
		return "", fmt.Errorf("%s: no plugin in the %s registered it: %w", what, h.desc, ErrNotFound)
	}
	what = fmt.Sprintf("call tool %s of plugin %s", tool, spec.Plugin)
	raw, err := m.requestOn(ctx, h, what, opCall, session, callBody{Tool: tool, Args: args})
	if err != nil {
		return "", err
	}
	var r resultBody
	if err := decodeBody(raw, &r); err != nil {
		return "", fmt.Errorf("%s: %v: %w", what, err, ErrProtocol)
	}
	return r.Result, nil
}

// Hook runs every hook registered for event in the host, as session. A
// payload value that is not plain data (a live handle) arrives as
// isolation.HostPlaceholder.
func (m *Manager) Hook(ctx context.Context, session, event string, payload map[string]any) error {
	what := "run hook " + event
	h, err := m.ensure(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	h.mu.Lock()
	refs := append([]Ref(nil), h.hooks[event]...)
	h.mu.Unlock()
	plain := make(map[string]any, len(payload))
	for k, v := range payload {
		if _, err := json.Marshal(v); err != nil {
			v = isolation.HostPlaceholder
		}
		plain[k] = v
	}
	var errs []error
	for _, r := range refs {
		if _, err := m.requestOn(ctx, h, what, opHook, session, hookBody{Ref: r, Payload: plain}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ConfigSchema runs a plugin's registered config schema function in the
// host.
func (m *Manager) ConfigSchema(ctx context.Context, pluginName string) (map[string]any, error) {
	_, raw, err := m.request(ctx, "config schema of plugin "+pluginName, opSchema, plugin.SessionID(ctx), schemaBody{Plugin: pluginName})
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("config schema of plugin %s: %v: %w", pluginName, err, ErrProtocol)
	}
	return out, nil
}
