package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tenantcanary/tenantcanary/internal/outerenv"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

// Mode is a value of terminal.sandbox.
type Mode string

// The modes.
const (
	Auto     Mode = "auto"
	Bwrap    Mode = "bwrap"
	Landlock Mode = "landlock"
	None     Mode = "none"
)

// Modes lists the modes in the order the docs give them.
var Modes = []Mode{Auto, Bwrap, Landlock, None}

// LauncherCommand is the agentd subcommand that runs the Landlock launcher:
// `agentd sandbox-exec POLICY -- COMMAND...`.
const LauncherCommand = "sandbox-exec"

var (
	// ErrBadMode is a terminal.sandbox value that is not one of Modes.
	ErrBadMode = errors.New("bad sandbox mode")
	// ErrUnavailable is a mode that cannot run on this machine.
	ErrUnavailable = errors.New("sandbox unavailable")
)

// ParseMode reads a terminal.sandbox value; "" is Auto.
func ParseMode(s string) (Mode, error) {
	v := Mode(strings.ToLower(strings.TrimSpace(s)))
	if v == "" {
		return Auto, nil
	}
	for _, m := range Modes {
		if v == m {
			return m, nil
		}
	}
	return "", fmt.Errorf("%w %q: want one of auto, bwrap, landlock, none", ErrBadMode, s)
}

// SystemDirs are the folders of the read-only system root: the only ones
// of the host's file system a sandboxed command sees, besides its home,
// workdir and private /tmp. A symlink among them (/bin -> usr/bin) stays a
// symlink.
var SystemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}

// Policy is what one sandboxed command may see and touch.
type Policy struct {
	// Mode is Bwrap, Landlock or None; Auto is resolved with Effective.
	Mode Mode
	// Home is the profile's home: visible, read-write.
	Home string
	// Hide are folders beneath Home or a system dir the command must not
	// see (the launch home's profiles folder, the managed scope).
	Hide []string
	// Work are more read-write folders (the workdir, when not in Home).
	Work []string
	// ReadOnly are more paths visible read-only (agentd's own executable,
	// for a plugin host).
	ReadOnly []string
	// TmpRoot is where a Landlock command's private tmp is made; "" is
	// agentd's own temp folder (os.TempDir: the operator's TMPDIR), never
	// the command's environment's.
	TmpRoot string
	// Dir is the working directory, inside Home or Work.
	Dir string
	// Self is the argv that runs agentd again: the launcher of landlock,
	// and of containment in mode none. Without it, none runs the command
	// directly (its session is still killed on Stop).
	Self []string

	// NoContain is the escaped-process fault: no namespace and no
	// subreaper, so a command's setsid children outlive it.
	NoContain bool
	// SharedPID is the host-shared-pidns fault: no PID (IPC, UTS)
	// namespace and the host's /proc.
	SharedPID bool

	// Allow are the real folders (symlinks resolved) a workdir outside
	// Home may lie beneath: the profile's home and workdir roots. Each such
	// workdir is opened without following symlinks, judged again (system
	// folders and Hide are refused whatever Allow says) and bound through
	// that descriptor, so a swap after the profile's check cannot win. Nil
	// judges system folders and Hide only.
	Allow []string
	// BindByPath is the workdir-anywhere fault: workdirs are bound by path,
	// through any symlink, unjudged.
	BindByPath bool
	// Network is what the command may reach: NetNone (its own empty network
	// namespace) or NetHost; "" is NetHost.
	Network Network
	// EnvOutside is the launcher-env fault: the command's environment is
	// also the whole environment of the programs that start it outside
	// the sandbox (bwrap, the launcher's two stages), so a tenant's
	// LD_PRELOAD runs its code there, unconfined.
	EnvOutside bool
}

// Network is a value of terminal.network.
type Network string

// The network modes.
const (
	// NetNone: a network namespace of its own, loopback only. A sandboxed
	// command cannot reach the host's listeners (the providers, agentd
	// itself, another tenant's servers) nor its abstract sockets.
	NetNone Network = "none"
	// NetHost: the host's network, as agentd's own.
	NetHost Network = "host"
)

// ErrBadNetwork is a terminal.network value that is neither none nor host.
var ErrBadNetwork = errors.New("bad network mode")

// ParseNetwork reads a terminal.network value; "" is def.
func ParseNetwork(s string, def Network) (Network, error) {
	switch v := Network(strings.ToLower(strings.TrimSpace(s))); v {
	case "":
		return def, nil
	case NetNone, NetHost:
		return v, nil
	}
	return "", fmt.Errorf("%w %q: want none or host", ErrBadNetwork, s)
}

// Cmd is a sandboxed command ready to start: the caller sets its stdio
// and process attributes, starts it, calls Started, and ends it (and
// everything it started) with Stop.
type Cmd struct {
	*exec.Cmd
	Mode    Mode // the mode it runs in
	contain bool // Stop asks a supervisor (bwrap, the launcher) to end the tree
	bwrap   bool

	infoR, infoW *os.File
	infoDone     chan struct{}
	inner        atomic.Int64 // bwrap's pid 1, in our numbering (0 until known)
	work         []*os.File   // the workdirs' descriptors, passed to the child and closed once it started
	feed         *envFeed     // the command's environment, to bwrap or the launcher; nil when the command has it itself
	pid          int
}

// Command returns argv sandboxed by p, with env as its whole environment
// and p.Dir as its working directory. Each workdir outside the home is
// opened and judged now and bound through its descriptor (see
// Policy.Allow).
//
// bwrap and the launcher, which start the command from outside the
// sandbox, get outerenv's allow-list of agentd's own environment as
// theirs, never env: env reaches them through a descriptor (envFeed:
// bwrap reads --setenv pairs with --args after --clearenv, the launcher's
// keeper reads the block) and becomes the environment only of the command
// they start, confined. bwrap's --setenv TMPDIR and the launcher's private
// tmp still win over env's TMPDIR. The launcher-env fault (EnvOutside)
// gives env to them instead, as before issue 46.
func (p Policy) Command(argv []string, env []string) (*Cmd, error) {
	if len(argv) == 0 {
		return nil, errors.New("sandbox command: empty argv")
	}
	mode, err := p.mode()
	if err != nil {
		return nil, err
	}
	c := &Cmd{Mode: mode}
	first := 3 // the first descriptor after stdio the child sees
	if mode == Bwrap {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("sandbox command: info pipe: %w", err)
		}
		c.infoR, c.infoW = r, w
		first = 4 // fd 3 is the info pipe, named in the argv
	}
	envFD := -1
	if p.startedOutside(mode) && !p.EnvOutside {
		data := envBlock(env)
		if mode == Bwrap {
			data = bwrapSetenv(env)
		}
		feed, err := newEnvFeed(data)
		if err != nil {
			c.StartFailed()
			return nil, err
		}
		c.feed, envFD = feed, first
		first++
	}
	binds, files, err := p.binds(mode, first)
	if err != nil {
		c.StartFailed()
		return nil, err
	}
	full := p.argv(mode, argv, c.infoW != nil, envFD, binds)
	c.Cmd = exec.Command(full[0], full[1:]...)
	c.Env = append([]string{}, env...)
	if c.feed != nil {
		c.Env = outerenv.Own()
	}
	c.Dir = p.Dir
	c.work = files
	if c.infoW != nil {
		c.ExtraFiles = append(c.ExtraFiles, c.infoW)
	}
	if c.feed != nil {
		c.ExtraFiles = append(c.ExtraFiles, c.feed.r)
	}
	c.ExtraFiles = append(c.ExtraFiles, files...)
	switch {
	case mode == Bwrap:
		c.bwrap, c.contain = true, !p.NoContain
	case len(p.Self) > 0 && !p.NoContain:
		c.contain = true // the launcher
	}
	return c, nil
}

// Wrap returns the argv that runs argv sandboxed by p, for a caller that
// starts it itself (a plugin host's launcher prefix): the environment and
// working directory are the caller's. Workdirs outside the home, judged as
// Command judges them, are bound by their (real, symlink-free) path: an
// argv cannot carry a descriptor.
func (p Policy) Wrap(argv []string) ([]string, error) {
	mode, err := p.mode()
	if err != nil {
		return nil, err
	}
	binds, files, err := p.binds(mode, -1)
	if err != nil {
		return nil, err
	}
	closeAll(files)
	return p.argv(mode, argv, false, -1, binds), nil
}

// Prefix is Wrap's argv before the command: a plugin host's launcher.
func (p Policy) Prefix() ([]string, error) {
	full, err := p.Wrap([]string{"X"})
	if err != nil {
		return nil, err
	}
	return full[:len(full)-1], nil
}

// mode is the mode p runs in here, or why it cannot run.
func (p Policy) mode() (Mode, error) {
	mode := p.Mode
	if mode == Auto || mode == "" {
		m, err := Effective(Auto)
		if err != nil {
			return "", err
		}
		mode = m
	}
	if err := p.check(); err != nil {
		return "", err
	}
	if p.NoContain && mode == Bwrap {
		// The escaped-process fault: confinement without containment.
		if Available(Landlock) == nil {
			mode = Landlock
		} else {
			mode = None
		}
	}
	switch mode {
	case Bwrap:
		if err := Available(Bwrap); err != nil {
			return "", err
		}
	case Landlock:
		if err := Available(Landlock); err != nil {
			return "", err
		}
		if len(p.Self) == 0 {
			return "", fmt.Errorf("sandbox landlock: no agentd executable to run the launcher (Policy.Self is empty)")
		}
		if p.Network == NetNone {
			if _, err := landlockNetNone(); err != nil {
				return "", err
			}
		}
	case None:
	default:
		return "", fmt.Errorf("%w %q", ErrBadMode, mode)
	}
	return mode, nil
}

// workBind is a workdir outside the home as the sandbox binds it: at dest,
// from the descriptor fd the child holds, or by path when fd < 0.
type workBind struct {
	dest string
	fd   int
}

// binds opens and judges the workdirs outside the home (mode none confines
// nothing and binds nothing; the workdir-anywhere fault binds by path,
// unjudged). With first >= 0 they are bound from descriptors numbered from
// first, which the caller passes to the child in order; else by path.
func (p Policy) binds(mode Mode, first int) ([]workBind, []*os.File, error) {
	var out []workBind
	if mode == None {
		return nil, nil, nil
	}
	if p.BindByPath {
		for _, w := range p.extraWork() {
			out = append(out, workBind{dest: w, fd: -1})
		}
		return out, nil, nil
	}
	files, err := p.openWork()
	if err != nil {
		return nil, nil, err
	}
	for i, w := range p.extraWork() {
		b := workBind{dest: w, fd: -1}
		if first >= 0 {
			b.fd = first + i
		}
		out = append(out, b)
	}
	if first < 0 {
		closeAll(files)
		files = nil
	}
	return out, files, nil
}

// startedOutside reports whether in mode a program of agentd's (bwrap,
// the launcher) starts the command, from outside the sandbox; otherwise
// agentd starts the command itself (mode none without containment).
func (p Policy) startedOutside(mode Mode) bool {
	return mode == Bwrap || mode == Landlock || (len(p.Self) > 0 && !p.NoContain)
}

// argv is the whole argv of argv sandboxed in mode (resolved by mode).
// envFD >= 0 is the descriptor the command's environment comes on.
func (p Policy) argv(mode Mode, argv []string, infoFD bool, envFD int, binds []workBind) []string {
	switch {
	case mode == Bwrap:
		return append(p.bwrapArgs(infoFD, envFD, binds), argv...)
	case mode == Landlock:
		return p.launcher(true, argv, binds, envFD)
	case !p.startedOutside(mode):
		return append([]string{}, argv...)
	}
	return p.launcher(false, argv, nil, envFD)
}

func (p Policy) check() error {
	for _, d := range append(append([]string{p.Home, p.Dir}, p.Work...), p.ReadOnly...) {
		if d != "" && !filepath.IsAbs(d) {
			return fmt.Errorf("sandbox policy: path %q is not absolute", d)
		}
	}
	if p.Home == "" {
		return errors.New("sandbox policy: no home")
	}
	switch p.Network {
	case "", NetNone, NetHost:
	default:
		return fmt.Errorf("sandbox policy: %w %q", ErrBadNetwork, p.Network)
	}
	return nil
}

// bwrapArgs is bubblewrap's argv up to the command. It drops every
// capability (bwrap keeps them when agentd runs as root), mounts a fresh
// /proc in a PID namespace of its own (only the host-shared-pidns fault
// shows the host's), the system folders read-only, and each extra workdir
// from its descriptor. envFD >= 0 is a descriptor of --setenv pairs (see
// bwrapSetenv): the command's environment, after --clearenv.
func (p Policy) bwrapArgs(infoFD bool, envFD int, binds []workBind) []string {
	a := []string{"bwrap", "--die-with-parent", "--new-session", "--cap-drop", "ALL"}
	if os.Geteuid() == 0 {
		// As root, --cap-drop ALL empties the effective and permitted sets
		// but leaves the bounding set; a user namespace of its own (uid 0
		// mapped to 0: file ownership is unchanged) empties that too. Not
		// root, bwrap makes one anyway.
		a = append(a, "--unshare-user")
	}
	if !p.SharedPID {
		a = append(a, "--unshare-pid", "--unshare-ipc", "--unshare-uts")
	}
	if p.Network == NetNone {
		a = append(a, "--unshare-net")
	}
	for _, d := range SystemDirs {
		if t, err := os.Readlink(d); err == nil {
			a = append(a, "--symlink", t, d)
			continue
		}
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			a = append(a, "--ro-bind", d, d)
		}
	}
	if p.SharedPID {
		a = append(a, "--ro-bind", "/proc", "/proc")
	} else {
		a = append(a, "--proc", "/proc")
	}
	a = append(a, "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp", "--tmpfs", "/run")
	a = append(a, "--bind", p.Home, p.Home)
	for _, b := range binds {
		if b.fd >= 0 {
			a = append(a, "--bind-fd", strconv.Itoa(b.fd), b.dest)
		} else {
			a = append(a, "--bind", b.dest, b.dest)
		}
	}
	for _, r := range p.ReadOnly {
		a = append(a, "--ro-bind", r, r)
	}
	for _, h := range p.Hide {
		if st, err := os.Stat(h); err == nil && st.IsDir() {
			a = append(a, "--tmpfs", h)
		}
	}
	if envFD >= 0 {
		a = append(a, "--clearenv", "--args", strconv.Itoa(envFD))
	}
	a = append(a, "--setenv", "TMPDIR", "/tmp")
	if p.Dir != "" {
		a = append(a, "--chdir", p.Dir)
	}
	if infoFD {
		a = append(a, "--info-fd", "3")
	}
	return append(a, "--")
}

// within reports whether path is dir or beneath it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// Started records the pid of the started command (the caller calls it
// right after Start).
func (c *Cmd) Started() {
	c.pid = c.Process.Pid
	closeAll(c.work)
	c.work = nil
	if c.feed != nil {
		c.feed.release()
	}
	if !c.bwrap {
		return
	}
	c.infoW.Close()
	c.infoDone = make(chan struct{})
	go func() {
		defer close(c.infoDone)
		defer c.infoR.Close()
		var info struct {
			ChildPid int `json:"child-pid"`
		}
		if err := json.NewDecoder(c.infoR).Decode(&info); err == nil {
			c.inner.Store(int64(info.ChildPid))
		}
	}()
}

// StartFailed releases what Command prepared when Start failed.
func (c *Cmd) StartFailed() {
	if c.infoR != nil {
		c.infoR.Close()
		c.infoW.Close()
	}
	if c.feed != nil {
		c.feed.release()
	}
	closeAll(c.work)
	c.work = nil
}

// stopGrace is how long a supervisor gets to end its tree before it is
// killed outright.
const stopGrace = 10 * time.Second

// namespaceEnded, after bwrap's pid 1 and the outer bwrap were killed,
// kills the outer bwrap's group and waits for it to be waited and for pid 1
// to be gone, and says whether they were. Then nothing the command started
// lives: a process cannot leave its PID namespace, the kernel kills every
// process of a namespace and waits for them before its pid 1 can end, and
// the outer bwrap was the only process of the session outside it. So the
// session needs no scan of the process table (each reads every process's
// stat file, and a server stops a shell at every session's end).
func (c *Cmd) namespaceEnded(waited <-chan struct{}) bool {
	inner := int(c.inner.Load())
	if inner <= 0 {
		return false
	}
	_ = syscall.Kill(-c.pid, syscall.SIGKILL)
	select {
	case <-waited:
	case <-time.After(stopGrace):
		return false
	}
	return gone(inner)
}

// gone waits up to stopGrace for pid to be gone, and says whether it is.
func gone(pid int) bool {
	for deadline := time.Now().Add(stopGrace); procgroup.Alive(pid); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// Stop ends the command and every process it started, and returns once
// they are gone. waited is closed when the caller's Wait on the command
// returned (the caller owns Wait). Call it on every path, also after the
// command ended on its own.
func (c *Cmd) Stop(waited <-chan struct{}) {
	if c.pid == 0 {
		return
	}
	switch {
	case c.bwrap && c.contain:
		// bwrap's pid 1 ends its namespace when it dies; the outer bwrap
		// exits once it has reaped it, so waited means all of it is gone.
		select {
		case <-c.infoDone:
		case <-waited:
		case <-time.After(stopGrace):
		}
		if inner := int(c.inner.Load()); inner > 0 {
			_ = syscall.Kill(inner, syscall.SIGKILL)
		}
		_ = syscall.Kill(c.pid, syscall.SIGKILL)
		if c.namespaceEnded(waited) {
			return
		}
	case c.contain:
		// The launcher kills its whole tree on SIGTERM, then exits.
		_ = syscall.Kill(c.pid, syscall.SIGTERM)
		select {
		case <-waited:
		case <-time.After(stopGrace):
		}
	}
	procgroup.KillSession(c.pid)
	<-waited
	procgroup.EmptySession(c.pid, stopGrace)
	if c.bwrap && c.contain {
		// The outer bwrap may exit as soon as the command did; its pid 1
		// (killed with it) is gone only once its namespace is empty.
		select {
		case <-c.infoDone:
		case <-time.After(stopGrace):
		}
		if inner := int(c.inner.Load()); inner > 0 {
			_ = syscall.Kill(inner, syscall.SIGKILL)
			gone(inner)
		}
	}
}
