package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenantcanary/tenantcanary/internal/proc"
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
	// Env is the environment the plugins run with: the profile's only.
	// isolation.HostProcessEnv=1 is added. It reaches the host over the
	// protocol (the load or extract request) and the host sets it on
	// itself before loading any plugin: the host's process, and whatever
	// launcher starts it from outside its sandbox (agentd's bwrap or
	// Landlock launcher, the operator's own), start with outerenv's
	// allow-list of agentd's own environment and the host's markers only
	// (see hostEnv), never a variable of the tenant's.
	Env []string
	// OwnPIDNamespace says the launcher runs the host in a PID namespace
	// of its own that the kernel ends with the host (agentd's bwrap
	// launcher: its pid 1 exits when the host does, and every process
	// left in the namespace is killed). The host then starts no keeper
	// (see ServeChild): the namespace already ends whatever the host
	// started, setsid and double forks included. Any other launcher, or
	// none, gets the keeper.
	OwnPIDNamespace bool
	// PluginsDir is the profile's plugins folder; Enabled, when not nil,
	// keeps only the plugins it names.
	PluginsDir string
	Enabled    []string
	// FollowLinks is agentd's seeded fault home-follows-links (test-only;
	// see homefs.Home.FollowLinks): the model-provider cache in Home is
	// read and written by plain path, following links. Never set it in a
	// server.
	FollowLinks bool
	// SpecialFiles is agentd's seeded fault home-special-files
	// (test-only; see homefs.Home.SpecialFiles): the plugins folder and
	// the model-provider cache are read blocking, whatever they are and
	// however large. Never set it in a server.
	SpecialFiles bool
	// TrustProfileEnv is agentd's seeded fault host-env-trusted
	// (test-only): the host takes agentd's own variables from the
	// profile's environment, .env included, so a tenant's
	// AGENTD_PLUGIN_HOST_KEEPER=inner turns its host's keeper off. Never
	// set it in a server.
	TrustProfileEnv bool
	// EnvOutside is agentd's seeded fault launcher-env (test-only): Env is
	// also the whole environment of the host's process and so of its
	// launcher, outside the sandbox, where a tenant's LD_PRELOAD runs
	// unconfined. Never set it in a server.
	EnvOutside bool
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
	started []string // the environment its process started with (hostEnv)
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
func (m *Manager) PID() int { return m.ofLive(func(h *hostProc) int { return h.pid }) }

// PGID is the live host's process group (the launcher's, when there is
// one), or 0.
func (m *Manager) PGID() int { return m.ofLive(func(h *hostProc) int { return h.pgid }) }

// ofLive is what get reads of the live host, under the lock, or 0 when
// there is none.
func (m *Manager) ofLive(get func(*hostProc) int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == nil {
		return 0
	}
	return get(m.cur)
}

// Generation counts the hosts started so far; the live host has this one.
func (m *Manager) Generation() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen
}
