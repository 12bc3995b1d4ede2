package tenants

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/tenantcanary/tenantcanary/fakellm"
)

// ProbeBegin and ProbeEnd bracket the environment snapshot the default
// responder asks the target's terminal tool to print.
const (
	ProbeBegin = "SNAPSHOT-BEGIN"
	ProbeEnd   = "SNAPSHOT-END"
)

// ProbeCommand is the terminal command of the default responder: dump the
// environment and cwd between markers, then export the tenant's shell-state
// canary, so a shell that another tenant reuses shows it in that tenant's
// next snapshot. It starts one process (env): nearly every turn of a run
// runs it, and a process start is the dearest thing a turn does. The
// shell's $PWD is what pwd prints (a shell checks an inherited PWD against
// "." when it starts, and cd keeps it), and the checks read the lines in
// any order.
func (t *Tenant) ProbeCommand() string {
	return "echo " + ProbeBegin + "; env; echo CWD=$PWD; echo " + ProbeEnd +
		"; export TENANT_SHELL_STATE=" + t.Value(ShellState)
}

// DefaultResponder answers a user turn with a terminal tool call running the
// probe, and a turn holding its result with the text "probe done for
// <tenant>" (see responder.go).
func DefaultResponder(t *Tenant) fakellm.Responder { return ProbeResponder(t, "terminal", "command") }

// ProbeResponder is DefaultResponder for a target whose shell tool is named
// tool and takes the command in its argument arg (exec{cmd}, say).
func ProbeResponder(t *Tenant, tool, arg string) fakellm.Responder {
	return probeResponder(t, tool, arg)
}

// Options shape a Build.
type Options struct {
	Names  []string // tenant names; default Names(3). The launch tenant is among them.
	Launch string   // the launch tenant's name; default "default" if present, else the first name
	Layout Layout   // empty fields default to AgentdLayout
	// NoProviders builds tenants without providers (for scans of files only).
	NoProviders bool
	// ProviderAddr is the listen address of every provider; default loopback, any port.
	ProviderAddr string
	// AdvertiseHost replaces the host of each provider's base URL (a staging
	// target reaching the providers over the network).
	AdvertiseHost string
	// Responder makes each tenant's main responder; default DefaultResponder.
	Responder func(*Tenant) fakellm.Responder
	// WorkRoot is where the workdirs are made, each tenant's in
	// WorkRoot/<its Profile()>; default Root/work. A staging run sets the
	// folder the target's host will have them in.
	WorkRoot string
	// MakeWorkdir, if set, makes a workdir in place of os.MkdirAll: a
	// running server's, on its host (harness/remote), when WorkRoot is a
	// folder there.
	MakeWorkdir func(dir string) error
	// Journal, if set, receives every provider's records as JSON lines
	// (fakellm's journal): a staging run reads them from another process.
	// It must be safe for concurrent writes.
	Journal io.Writer
}

// Set is the tenants of one run under one sandbox root.
type Set struct {
	Root       string // the sandbox root
	Home       string // the sandbox HOME: Root/home
	LaunchHome string // the launch profile's home: Home/<Layout.LaunchDir>
	Layout     Layout
	Tenants    []*Tenant

	opts     Options // how tenants were built, for AddTenant
	workRoot string
}

// Names returns n tenant names: default, alpha, beta, gamma, ... then t<N>.
func Names(n int) []string {
	greek := []string{"default", "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota",
		"kappa", "lambda", "mu", "nu", "xi", "omicron", "pi", "rho", "sigma", "tau", "upsilon", "phi", "chi", "psi", "omega"}
	out := make([]string, 0, n)
	for i := 0; i < n; i++ {
		if i < len(greek) {
			out = append(out, greek[i])
		} else {
			out = append(out, fmt.Sprintf("t%03d", i))
		}
	}
	return out
}

// Build makes the tenants under root: HOME at root/home, the launch tenant's
// home at the launch folder, the others under its profiles folder, one
// workdir each under root/work/<profile>, and (unless NoProviders) one started
// provider each, accepting that tenant's key only. On error nothing started
// is left running. Homes are not written: see WriteHomes.
func Build(root string, opts Options) (*Set, error) {
	names := opts.Names
	if len(names) == 0 {
		names = Names(3)
	}
	launch := opts.Launch
	if launch == "" {
		launch = names[0]
		for _, n := range names {
			if n == "default" {
				launch = n
			}
		}
	}
	seen := map[string]bool{}
	for _, n := range names {
		if err := ValidName(n); err != nil {
			return nil, fmt.Errorf("build tenants: %w", err)
		}
		if seen[n] {
			return nil, fmt.Errorf("build tenants: name %q given twice", n)
		}
		seen[n] = true
	}
	if !seen[launch] {
		return nil, fmt.Errorf("build tenants: launch tenant %q is not among %v", launch, names)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("build tenants: resolve root %q: %w", root, err)
	}
	layout := opts.Layout.WithDefaults()
	s := &Set{Root: abs, Home: filepath.Join(abs, "home"), Layout: layout}
	s.LaunchHome = filepath.Join(s.Home, layout.LaunchDir)
	if err := CheckSandboxHome(s.Home); err != nil {
		return nil, fmt.Errorf("build tenants: %w", err)
	}
	workRoot := opts.WorkRoot
	if workRoot == "" {
		workRoot = filepath.Join(abs, "work")
	}
	if workRoot, err = filepath.Abs(workRoot); err != nil {
		return nil, fmt.Errorf("build tenants: resolve work root: %w", err)
	}
	s.opts, s.workRoot = opts, workRoot
	for _, n := range names {
		t, err := s.newTenant(n, n == launch)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.Tenants = append(s.Tenants, t)
	}
	return s, nil
}

// WorkRoot is the folder of every tenant's workdirs: tenant t's lie in
// WorkRoot()/<t.Profile()>.
func (s *Set) WorkRoot() string { return s.workRoot }

// Get returns the tenant named name, or nil.
func (s *Set) Get(name string) *Tenant {
	for _, t := range s.Tenants {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// Launch returns the launch tenant.
func (s *Set) Launch() *Tenant {
	for _, t := range s.Tenants {
		if t.Launch {
			return t
		}
	}
	return nil
}

// Canaries lists every canary of every tenant, tenant by tenant.
func (s *Set) Canaries() []Canary {
	var out []Canary
	for _, t := range s.Tenants {
		out = append(out, t.Canaries()...)
	}
	return out
}

// WriteHomes writes every tenant's home with the same extras.
func (s *Set) WriteHomes(extras HomeExtras) error {
	for _, t := range s.Tenants {
		if err := t.WriteHome(s.Layout, extras); err != nil {
			return err
		}
	}
	return nil
}

// Env is the hermetic environment of the target's processes: the current
// process's environment scrubbed, HOME at the sandbox, extra applied.
func (s *Set) Env(extra map[string]string) ([]string, error) {
	return HermeticEnv(os.Environ(), s.Home, s.Layout, extra)
}

// Close stops every provider. It is safe to call more than once.
func (s *Set) Close() {
	for _, t := range s.Tenants {
		if t.Provider != nil {
			t.Provider.Close()
		}
	}
}

// newTenant makes one tenant: tag, home path, workdir and (unless the set
// has no providers) its provider.
func (s *Set) newTenant(name string, launch bool) (*Tenant, error) {
	tag, err := NewTag()
	if err != nil {
		return nil, fmt.Errorf("build tenant %s: %w", name, err)
	}
	t := &Tenant{Name: name, Launch: launch, Tag: tag}
	t.Home = s.LaunchHome
	if !launch {
		t.Home = filepath.Join(s.LaunchHome, s.Layout.ProfilesDir, name)
	}
	t.State = s.Layout.StateFolder(s.Root, t)
	t.workDir = filepath.Join(s.workRoot, t.Profile())
	t.Workdir = filepath.Join(t.workDir, CanaryValue(Workdir, name, tag))
	t.mkdir = s.opts.MakeWorkdir
	if err := t.makeWorkdir(t.Workdir); err != nil {
		return nil, fmt.Errorf("build tenant %s: create workdir: %w", name, err)
	}
	if s.opts.NoProviders {
		return t, nil
	}
	respond := s.opts.Responder
	if respond == nil {
		respond = DefaultResponder
	}
	advertise := ""
	if s.opts.AdvertiseHost != "" {
		advertise = "http://" + s.opts.AdvertiseHost
	}
	srv, err := fakellm.New(fakellm.Options{
		Keys:         []string{t.ProviderKey()},
		Addr:         s.opts.ProviderAddr,
		AdvertiseURL: advertise,
		Model:        t.Model(),
		Responder:    respond(t),
		Journal:      s.opts.Journal,
		ReplyCanary:  t.Value(Reply),
		TurnBound:    fakellm.LoopBound,
	})
	if err != nil {
		return nil, fmt.Errorf("build tenant %s: start provider: %w", name, err)
	}
	t.Provider = srv
	return t, nil
}

// AddTenant adds a tenant to a built set mid-run (a profile created while
// the target serves): a named profile with its own tag, workdir and
// provider, scanned like the others from then on. Its home is not written.
// It changes Tenants, so it must not run while another goroutine reads it.
func (s *Set) AddTenant(name string) (*Tenant, error) {
	if err := ValidName(name); err != nil {
		return nil, fmt.Errorf("add tenant: %w", err)
	}
	for _, t := range s.Tenants {
		if t.Name == name {
			return nil, fmt.Errorf("add tenant: %q exists", name)
		}
	}
	t, err := s.newTenant(name, false)
	if err != nil {
		return nil, err
	}
	s.Tenants = append(s.Tenants, t)
	return t, nil
}
