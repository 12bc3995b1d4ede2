package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tenantcanary/tenantcanary/harness/remote"
	"github.com/tenantcanary/tenantcanary/harness/slowproxy"
	"github.com/tenantcanary/tenantcanary/harness/stores"
	"github.com/tenantcanary/tenantcanary/internal/placeholder"
	"github.com/tenantcanary/tenantcanary/internal/proc"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// ErrEscapedSandbox is returned when the target resolves its profiles
// outside the sandbox: writing tenants there could touch a real install.
var ErrEscapedSandbox = errors.New("target's profile root lies outside the sandbox")

// Sandbox is one run's world: a root folder holding HOME, the tenants' homes
// and workdirs and the logs, the tenants with their providers, the target,
// and every process started for it. Close stops them all and reports any
// process of the run that survived.
type Sandbox struct {
	Root   string
	RunID  string // marks every process of the run (procgroup.MarkerVar)
	Target Target
	Set    *tenants.Set
	Logs   string // folder of the processes' logs
	// Cwd and Tmp are the working folder and TMPDIR of every target
	// process: shared places inside the sandbox, scanned like the rest.
	Cwd, Tmp string
	// Operator holds the operator's secrets the harness knows (kind ->
	// value): the managed scope's planted canary and the target file's
	// secrets. The serve token is the scenario's (it makes it).
	Operator map[string]string

	grace      time.Duration // how long a process has to stop on SIGTERM at Close
	stores     *stores.Set   // the target's shared stores (Target.Stores), started or reached
	storeVars  map[string]string
	env        []string        // hermetic base environment of every target process
	sysTmpSeen map[string]bool // entries of the system temp folder when the sandbox was made

	mu    sync.Mutex
	procs []*Proc
	seq   int
	serve serveAddr // the serve backend now up, for hooks

	sharedMu sync.Mutex  // guards shared and the shared config file
	shared   sharedState // what the shared config is written from

	// A running server's homes (Target.RemoteFiles): ctx is the
	// sandbox's, for a push after a write; pushCtx, while set, defers the
	// push to the plant that writes every home.
	ctx, pushCtx context.Context
	mirrorMu     sync.Mutex       // one pull or push at a time
	remoteHome   *remote.Mirror   // the running server's home folder (mirror)
	remoteShared []*remote.Mirror // its shared folders (remote.shared), by index
}

// serveAddr is where the serve backend listens and the token it takes.
type serveAddr struct{ base, token string }

// NoteServe records the serve backend now up (base URL, operator token):
// every hook from then on gets them in its environment (HookServeVars), so
// a hook can call the server itself. An empty base forgets it.
func (s *Sandbox) NoteServe(base, token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.serve = serveAddr{base: base, token: token}
}

// HookServeVars are the variables a hook gets while the serve backend is
// up: its base URL, host, port and the operator token.
var HookServeVars = []string{"TARGET_URL", "TARGET_HOST", "TARGET_PORT", "TARGET_TOKEN"}

// serveEnv is HookServeVars' values, none while no serve backend is up.
func (s *Sandbox) serveEnv() map[string]string {
	s.mu.Lock()
	a := s.serve
	s.mu.Unlock()
	if a.base == "" {
		return nil
	}
	env := map[string]string{"TARGET_URL": a.base, "TARGET_TOKEN": a.token}
	if u, err := url.Parse(a.base); err == nil {
		env["TARGET_HOST"], env["TARGET_PORT"] = u.Hostname(), u.Port()
	}
	return env
}

// SandboxOptions shape NewSandbox.
type SandboxOptions struct {
	Tenants tenants.Options    // names, launch, providers
	Extras  tenants.HomeExtras // config and .env additions for every home
	Grace   time.Duration      // how long a process has to stop on SIGTERM at Close; default the target's stop grace (Target.TimesFor)
	// StoreProxies, when set, puts a delaying proxy started with these
	// options in front of every store of the target (stores.Set.Proxy):
	// the {<name>_url} handed to the target point at the proxies, whose
	// delays the scenario sets (Sandbox.Stores, Store.Proxy).
	StoreProxies *slowproxy.Options
}

// NewSandbox builds tenants under root, proves the target resolves its
// profiles inside root, and writes the homes. On error nothing is left
// running.
func NewSandbox(ctx context.Context, root string, target Target, opts SandboxOptions) (*Sandbox, error) {
	if err := target.Validate(); err != nil {
		return nil, fmt.Errorf("sandbox: target %s: %w", target.Name, err)
	}
	id, err := newRunID()
	if err != nil {
		return nil, err
	}
	opts.Tenants.Layout = target.Layout
	if opts.Tenants.Responder == nil {
		opts.Tenants.Responder = target.Dialect.probeResponder()
	} else {
		opts.Tenants.Responder = target.Dialect.shellTool(opts.Tenants.Responder)
	}
	var set *tenants.Set
	if target.TenantsFile != "" {
		// A staging run: the tenants the server was provisioned with, their
		// providers in the `canary-run fakellm` process.
		roster, err := tenants.ReadRoster(target.TenantsFile)
		if err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
		set, err = tenants.FromRoster(root, roster, target.Layout, target.Journal)
		if err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
	} else if set, err = tenants.Build(root, withRemoteTenants(ctx, target, root, opts.Tenants)); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	s := &Sandbox{Root: set.Root, RunID: id, Target: target, Set: set, Logs: filepath.Join(set.Root, "logs"),
		Cwd: filepath.Join(set.Root, "cwd"), Tmp: filepath.Join(set.Root, "tmp"), Operator: map[string]string{},
		sysTmpSeen: listDir(os.TempDir()), grace: opts.Grace, ctx: ctx}
	if s.grace <= 0 {
		s.grace = target.TimesFor(0).Stop
	}
	fail := func(err error) (*Sandbox, error) {
		s.Close()
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	for _, dir := range []string{s.Logs, set.Home, s.Cwd, s.Tmp} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fail(err)
		}
	}
	if sr := set.Layout.StateRootOf(s.Root); sr != "" && target.Files && !target.Remote() {
		// The tenants' state folders are the target's to make; their root
		// is there from the start, so every snapshot of it compares.
		if err := os.MkdirAll(sr, 0o755); err != nil {
			return fail(err)
		}
	}
	// The stores come first: every target process, the profile-root
	// check's included, may be handed their URLs.
	if len(target.Stores) > 0 {
		dir := s.StoresDir()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fail(err)
		}
		if s.stores, err = stores.Open(ctx, target.Stores, dir); err != nil {
			return fail(err)
		}
		if opts.StoreProxies != nil {
			if err := s.stores.Proxy(*opts.StoreProxies); err != nil {
				return fail(err)
			}
		}
	}
	s.storeVars = s.stores.Vars()
	vars := map[string]string{"root": s.Root, "replica": "1"}
	for k, v := range s.storeVars {
		vars[k] = v
	}
	extra := map[string]string{procgroup.MarkerVar: id, "TMPDIR": s.Tmp}
	for k, v := range target.Env {
		extra[k] = placeholder.String(v, vars)
	}
	if s.env, err = set.Env(extra); err != nil {
		return fail(err)
	}
	if target.Managed != nil && !target.Remote() {
		if err := s.writeManaged(); err != nil {
			return fail(err)
		}
	}
	if target.Files && !target.Remote() && !target.IsGateway() { // a gateway has no homes
		if err := s.checkProfileRoot(ctx); err != nil {
			return fail(err)
		}
		if err := s.writeHomes(opts.Extras); err != nil {
			return fail(err)
		}
		if err := s.plantOperatorSecrets(); err != nil {
			return fail(err)
		}
	} else if target.RemoteFiles() {
		if err := s.plantRemote(ctx, opts.Extras); err != nil {
			return fail(err)
		}
	}
	for i, v := range target.Secrets {
		s.Operator[fmt.Sprintf("declared_secret_%d", i+1)] = v
	}
	return s, nil
}

// writeManaged writes the target's managed scope as config.yaml in its
// managed folder, which must lie inside the sandbox.
func (s *Sandbox) writeManaged() error {
	dir := fillRoot(s.Target.ManagedDir, s.Root)
	if !within(dir, s.Root) || dir == s.Root {
		return fmt.Errorf("managed scope folder %s is not inside %s", dir, s.Root)
	}
	data, err := yaml.Marshal(s.Target.ManagedFor(s.Root))
	if err != nil {
		return fmt.Errorf("encode managed config: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("managed scope: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), data, 0o644); err != nil {
		return fmt.Errorf("managed scope: %w", err)
	}
	return nil
}

// MergeManaged deep-merges cfg into the managed scope's config.yaml as it
// stands (the planted operator canary included): the operator's settings a
// scenario needs before it starts the server (a plugin host's limits, say),
// which a profile's own config may not set. A target without a managed
// scope (no managed_dir), or a remote one, is left alone: it returns false.
func (s *Sandbox) MergeManaged(cfg map[string]any) (bool, error) {
	if s.Target.ManagedDir == "" || s.Target.Remote() {
		return false, nil
	}
	dir := fillRoot(s.Target.ManagedDir, s.Root)
	if !within(dir, s.Root) || dir == s.Root {
		return false, fmt.Errorf("managed scope folder %s is not inside %s", dir, s.Root)
	}
	path := filepath.Join(dir, "config.yaml")
	cur := map[string]any{}
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return false, fmt.Errorf("managed scope: %w", err)
	}
	if err := yaml.Unmarshal(data, &cur); err != nil {
		return false, fmt.Errorf("managed scope %s: %w", path, err)
	}
	if data, err = yaml.Marshal(tenants.DeepMerge(cur, cfg)); err != nil {
		return false, fmt.Errorf("encode managed config: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("managed scope: %w", err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return false, fmt.Errorf("managed scope: %w", err)
	}
	return true, nil
}

func newRunID() (string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("sandbox: run id: %w", err)
	}
	return "run-" + hex.EncodeToString(b[:]), nil
}

// checkProfileRoot asks the target where its named profiles resolve, before
// anything is written, and refuses a place outside the sandbox.
func (s *Sandbox) checkProfileRoot(ctx context.Context) error {
	out, err := s.RunCommand(ctx, "profile root", s.Target.ProfileRoot, nil)
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	got := strings.TrimSpace(lines[len(lines)-1])
	if got == "" || !filepath.IsAbs(got) {
		return fmt.Errorf("%s printed %q, not an absolute path", strings.Join(s.Target.ProfileRoot, " "), got)
	}
	if resolved, err := filepath.EvalSymlinks(filepath.Dir(got)); err == nil {
		got = filepath.Join(resolved, filepath.Base(got))
	}
	if !within(got, s.Root) {
		return fmt.Errorf("%w: %s is not inside %s", ErrEscapedSandbox, got, s.Root)
	}
	return nil
}

func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// Env is the hermetic environment of the target's processes plus extra.
func (s *Sandbox) Env(extra map[string]string) []string {
	env := append([]string(nil), s.env...)
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

// Stores are the target's shared stores (Target.Stores), running for the
// sandbox's life; none for a target that declares none.
func (s *Sandbox) Stores() []*stores.Store { return s.stores.Stores() }

// StoresDir is the folder of the stores the harness starts: their data,
// which the shared-place scan leaves to the store scan.
func (s *Sandbox) StoresDir() string { return filepath.Join(s.Root, "stores") }

// ReplicaEnv is the target's env values that name {replica}, filled with
// replica n (1-based): what a serve replica's process gets beside the
// sandbox's environment (where every {replica} is 1).
func (s *Sandbox) ReplicaEnv(n int) map[string]string {
	out := map[string]string{}
	vars := map[string]string{"root": s.Root, "replica": strconv.Itoa(n)}
	for k, v := range s.storeVars {
		vars[k] = v
	}
	for k, v := range s.Target.Env {
		if slices.Contains(placeholder.Names(v), "replica") {
			out[k] = placeholder.String(v, vars)
		}
	}
	return out
}

// StoreVars are the stores' placeholders ({redis_url}, ...) and their URLs.
func (s *Sandbox) StoreVars() map[string]string { return maps.Clone(s.storeVars) }

// Start runs one target process in the sandbox: cwd Cwd, TMPDIR Tmp, hermetic
// environment (plus extra), its log in Logs. Its argv's store placeholders
// ({redis_url}, ...) are filled, and a {replica} left in it is 1 (a serve
// replica's caller fills its own number first: ReplicaEnv). The process is stopped by
// Close if the caller has not stopped it.
func (s *Sandbox) Start(ctx context.Context, name string, argv []string, stdin bool, extra map[string]string) (*Proc, error) {
	return s.start(ctx, name, argv, stdin, s.Env(extra))
}

// start is Start with the process's whole environment env.
func (s *Sandbox) start(ctx context.Context, name string, argv []string, stdin bool, env []string) (*Proc, error) {
	s.mu.Lock()
	s.seq++
	logPath := filepath.Join(s.Logs, fmt.Sprintf("%02d-%s.log", s.seq, strings.ReplaceAll(name, " ", "-")))
	s.mu.Unlock()
	argv = placeholder.Strings(placeholder.Strings(argv, s.storeVars), map[string]string{"replica": "1"})
	p, err := StartProc(ctx, ProcSpec{Name: name, Argv: argv, Dir: s.Cwd, Env: env, LogPath: logPath, Stdin: stdin})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	return p, nil
}

// RunCommand runs a one-shot target command to its end and returns its
// stdout; a non-zero exit is an error showing the output.
func (s *Sandbox) RunCommand(ctx context.Context, name string, argv []string, extra map[string]string) (string, error) {
	if len(argv) == 0 {
		return "", fmt.Errorf("%s: the target gives no command for it", name)
	}
	p, err := s.Start(ctx, name, argv, false, extra)
	if err != nil {
		return "", err
	}
	return s.waitCommand(ctx, name, p)
}

// waitCommand waits for p, a one-shot command, to end, killing it when
// ctx ends first, and returns its stdout.
func (s *Sandbox) waitCommand(ctx context.Context, name string, p *Proc) (string, error) {
	select {
	case <-p.Done():
	case <-ctx.Done():
		p.Kill()
		return "", fmt.Errorf("%s: %w\n%s", name, ctx.Err(), p.Tail())
	}
	if err := p.ExitErr(); err != nil {
		return "", fmt.Errorf("%s: %w\n%s", name, err, p.Tail())
	}
	return strings.Join(p.Lines(), "\n"), nil
}

// Procs lists every process the sandbox started.
func (s *Sandbox) Procs() []*Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Proc(nil), s.procs...)
}

// Survivors lists live processes carrying the run's marker: anything the
// target spawned (shells, plugin hosts) that outlived its owner.
func (s *Sandbox) Survivors() []int { return procgroup.Marked(s.RunID) }

// Close stops every process (SIGTERM, then SIGKILL after the grace), closes
// the providers, and returns an error listing any process of the run still
// alive after a bounded wait; those are killed.
func (s *Sandbox) Close() error {
	var errs []error
	for _, p := range s.Procs() {
		if err := p.Stop(s.grace); err != nil && !isSignalExit(err) {
			errs = append(errs, fmt.Errorf("stop %s: %w", p.Name(), err))
		}
	}
	if s.Set != nil {
		s.Set.Close()
	}
	// The target is stopped: its stores may go.
	if err := s.stores.Close(); err != nil {
		errs = append(errs, err)
	}
	// Children die with their parents' process groups or by the
	// parent-death signal, which takes a moment: poll, then kill survivors.
	deadline := time.Now().Add(10 * time.Second)
	var left []int
	for {
		left = s.Survivors()
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(left) > 0 {
		var desc []string
		for _, pid := range left {
			cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
			desc = append(desc, fmt.Sprintf("%d (%s)", pid, strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")))
			_ = procgroup.Kill(pid)                // its group, if it leads one
			_ = syscall.Kill(pid, syscall.SIGKILL) // and itself, if it does not
		}
		errs = append(errs, fmt.Errorf("processes of run %s outlived their owners: %s", s.RunID, strings.Join(desc, ", ")))
	}
	return errors.Join(errs...)
}

// isSignalExit reports whether err is the exit of a process that SIGTERM
// ended by its default action: asked to stop, it stopped.
func isSignalExit(err error) bool { return proc.IsSignalExit(err) }
