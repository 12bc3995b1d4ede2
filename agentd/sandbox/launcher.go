package sandbox

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

// ErrLauncherUsage is a sandbox-exec call without its spec and command.
var ErrLauncherUsage = errors.New("usage: agentd sandbox-exec SPEC -- COMMAND [ARGS] (started by agentd itself)")

// ExitIfLauncher is for a binary that is its own launcher (Policy.Self),
// a test binary's TestMain above all: when args (os.Args) are
// `<self> sandbox-exec ...` it runs RunLauncher and exits with its status;
// otherwise it returns.
func ExitIfLauncher(args []string, stderr io.Writer) {
	if len(args) > 1 && args[1] == LauncherCommand {
		os.Exit(RunLauncher(args[2:], stderr))
	}
}

// RunLauncher is `agentd sandbox-exec SPEC -- COMMAND...` (args follow the
// subcommand's name). It runs in two stages: the first starts the second
// (the keeper) in a session of its own and passes signals on; the keeper
// confines the thread that starts the command with Landlock (when the spec
// says so), becomes a child subreaper, runs the command, and when the
// command ends, it gets SIGTERM, or the first stage dies (parent-death
// signal: agentd died, or killed the first stage's group), kills every
// descendant, those that called setsid or were orphaned by a double fork
// included. It exits with the command's status.
func RunLauncher(args []string, stderr io.Writer) int {
	if len(args) < 3 || args[1] != "--" {
		fmt.Fprintln(stderr, ErrLauncherUsage)
		return 2
	}
	var spec launchSpec
	if err := json.Unmarshal([]byte(args[0]), &spec); err != nil {
		fmt.Fprintf(stderr, "agentd sandbox-exec: bad spec: %v\n%v\n", err, ErrLauncherUsage)
		return 2
	}
	argv := args[2:]
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "agentd sandbox-exec: "+format+"\n", a...)
		return 126
	}
	// The workdirs' and the environment's descriptors pass to the keeper
	// explicitly, never on to the command.
	for _, fd := range spec.inherited() {
		syscall.CloseOnExec(fd)
	}
	// Die (cleanly, killing the tree) with agentd.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0, 0, 0); err != nil {
		return fail("set parent-death signal: %v", err)
	}
	if spec.Parent != 0 && os.Getppid() != spec.Parent {
		return fail("agentd (pid %d) is already gone", spec.Parent)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if spec.Contain && !spec.Keeper {
		return runFirstStage(spec, args, sigs, fail)
	}
	if spec.Contain {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return fail("become a child subreaper: %v", err)
		}
	}
	env, err := commandEnv(spec)
	if err != nil {
		return fail("%v", err)
	}
	var tmp string
	if spec.Tmp {
		d, err := os.MkdirTemp(spec.TmpRoot, "agentd-tool-tmp-")
		if err != nil {
			return fail("private tmp: %v", err)
		}
		tmp = d
		defer os.RemoveAll(tmp)
		env = setEnv(env, "TMPDIR", tmp)
	}
	path, err := lookPath(argv[0], env)
	if err != nil {
		return fail("%v", err)
	}

	if !spec.Contain {
		runtime.LockOSThread()
		if spec.Landlock {
			if err := restrictThread(spec, tmp); err != nil {
				return fail("apply landlock: %v", err)
			}
		}
		err := syscall.Exec(path, argv, env)
		return fail("exec %s: %v", argv[0], err)
	}
	// Landlock binds to the calling thread's credentials, and a child
	// inherits the credentials of the thread that forks it: one locked
	// thread restricts itself and starts the command, and stays (the
	// child's parent-death signal is tied to it) while this launcher's
	// other threads, unrestricted, watch /proc and kill the tree.
	started := make(chan error, 1)
	var cmd *exec.Cmd
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the launcher
		if spec.Landlock {
			if err := restrictThread(spec, tmp); err != nil {
				started <- fmt.Errorf("apply landlock: %w", err)
				return
			}
		}
		cmd = &exec.Cmd{Path: path, Args: argv, Env: env, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
			SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}}
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("start %s: %w", argv[0], err)
			return
		}
		started <- nil
		select {} // keep the thread
	}()
	if err := <-started; err != nil {
		return fail("%v", err)
	}
	releaseStdio()
	child := cmd.Process.Pid

	// One reaper for every child, adopted ones included.
	exited := make(chan syscall.WaitStatus, 1)
	allGone := make(chan struct{})
	go func() {
		defer close(allGone)
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, 0, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil { // ECHILD: nothing left
				return
			}
			if pid == child {
				exited <- ws
			}
		}
	}()
	code := 0
	select {
	case ws := <-exited:
		code = exitCode(ws)
	case sig := <-sigs:
		code = 128 + int(sig.(syscall.Signal))
	}
	killTree(allGone)
	return code
}

// runFirstStage starts the keeper (this launcher again, the spec marked
// Keeper) in a session of its own and waits for it, passing on SIGTERM,
// SIGINT and SIGHUP. A SIGKILL of this stage (its supervisor killing its
// process group, say) reaches the keeper as its parent-death signal,
// SIGTERM, and the keeper still ends the whole tree.
func runFirstStage(spec launchSpec, args []string, sigs <-chan os.Signal, fail func(string, ...any) int) int {
	exe, err := os.Executable()
	if err != nil {
		return fail("find this program to start the keeper: %v", err)
	}
	spec.Keeper, spec.Parent = true, os.Getpid()
	b, err := json.Marshal(spec)
	if err != nil {
		return fail("encode the keeper's spec: %v", err)
	}
	prefix := os.Args[:len(os.Args)-len(args)] // [self..., sandbox-exec]
	argv := append(append(append([]string{}, prefix...), string(b)), args[1:]...)
	keeper := &exec.Cmd{Path: exe, Args: argv, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGTERM}}
	for _, fd := range spec.inherited() { // the keeper sees each at the same number
		for len(keeper.ExtraFiles) <= fd-3 {
			keeper.ExtraFiles = append(keeper.ExtraFiles, nil)
		}
		keeper.ExtraFiles[fd-3] = os.NewFile(uintptr(fd), "inherited")
	}
	runtime.LockOSThread() // the keeper's parent-death signal is tied to this thread
	if err := keeper.Start(); err != nil {
		return fail("start the keeper: %v", err)
	}
	releaseStdio()
	done := make(chan int, 1)
	go func() {
		err := keeper.Wait()
		if ee, ok := err.(*exec.ExitError); ok {
			done <- exitCode(ee.Sys().(syscall.WaitStatus))
			return
		}
		if err != nil {
			done <- 126
			return
		}
		done <- 0
	}()
	for {
		select {
		case code := <-done:
			return code
		case sig := <-sigs:
			_ = keeper.Process.Signal(sig)
		}
	}
}

// releaseStdio points this launcher's stdin and stdout at /dev/null once
// the command holds them: the command's are its own alone, so when it
// dies, a write to its stdin fails at once (the caller knows the request
// was never read, and may send it to the command's successor) and its
// stdout ends at once (the caller sees it gone), whatever the launcher
// does next. stderr stays, for the launcher's own errors.
func releaseStdio() {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return // the command still runs; only its death is seen later
	}
	defer null.Close()
	for _, fd := range []int{0, 1} {
		_ = unix.Dup2(int(null.Fd()), fd)
	}
}

// killTree kills every descendant until none is left (the reaper saw
// ECHILD), or gives up after a minute (a process stuck in the kernel).
func killTree(allGone <-chan struct{}) {
	self := os.Getpid()
	deadline := time.After(time.Minute)
	for {
		procgroup.KillDescendants(self)
		select {
		case <-allGone:
			return
		case <-deadline:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func exitCode(ws syscall.WaitStatus) int {
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return 1
}

// commandEnv is the environment the command runs with: read from the
// spec's descriptor (agentd's Command sends it so, and this launcher's own
// environment is agentd's allow-list only), else this launcher's own (a
// caller that starts the launcher itself with the command's environment:
// a plugin host's launcher prefix, the launcher-env fault).
func commandEnv(spec launchSpec) ([]string, error) {
	if spec.EnvFD <= 0 {
		return os.Environ(), nil
	}
	return readEnvBlock(spec.EnvFD)
}

// lookPath finds file as the command's environment's PATH would, not this
// launcher's: bwrap, too, finds the command by the PATH it runs it with.
func lookPath(file string, env []string) (string, error) {
	if strings.Contains(file, "/") {
		return exec.LookPath(file)
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		if p, err := exec.LookPath(dir + "/" + file); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec: %q: %w in the command's PATH", file, exec.ErrNotFound)
}

func setEnv(env []string, name, value string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return append(out, name+"="+value)
}

// restrictThread applies the spec's confinement to the calling (locked)
// thread, which then starts the command: the network taken away when the
// spec says so, Landlock (read-only system dirs, read-write home, workdirs
// and tmp, no /proc unless the spec shows it, no signals or abstract
// sockets out of the domain), no capabilities (bounding, ambient,
// effective, permitted and inheritable sets emptied: agentd may run as
// root) and no_new_privs.
func restrictThread(spec launchSpec, tmp string) error {
	cfg := landlock.Config{HandledAccessFS: landlock.V6.HandledAccessFS, Scoped: landlock.V6.Scoped}
	if spec.NoNet {
		netns, err := landlockNetNone()
		if err != nil {
			return err
		}
		if netns {
			// Only this thread moves (and the command it starts): the
			// launcher's other threads keep agentd's network.
			if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("terminal.network none: unshare a network namespace: %w", err)
			}
		}
		// No TCP (and, where the kernel knows it, UDP) rule: none allowed.
		cfg.HandledAccessNet = landlock.V10.HandledAccessNet
	}
	cfg = cfg.BestEffort()
	rules := []landlock.Rule{
		landlock.RODirs(spec.RODirs...).IgnoreIfMissing(),
		landlock.ROFiles(spec.ROFiles...).IgnoreIfMissing(),
		landlock.RWDirs(spec.RWDirs...).WithRefer().IgnoreIfMissing(),
		landlock.RWFiles(spec.RWFiles...).WithIoctlDev().IgnoreIfMissing(),
	}
	for _, fd := range spec.RWDirFDs {
		// The magic link reopens the very folder agentd opened and judged.
		rules = append(rules, landlock.RWDirs("/proc/self/fd/"+strconv.Itoa(fd)).WithRefer())
	}
	if tmp != "" {
		rules = append(rules, landlock.RWDirs(tmp).WithRefer())
	}
	if spec.ShowProc {
		rules = append(rules, landlock.RODirs("/proc"))
	}
	fd, flags, err := cfg.NewRulesetFD(rules...)
	if err != nil {
		return err
	}
	if fd < 0 {
		return errors.New("this kernel has no Landlock: nothing would be restricted")
	}
	defer syscall.Close(fd)
	if err := dropCaps(); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if err := ll.LandlockRestrictSelf(fd, flags); err != nil {
		return fmt.Errorf("landlock_restrict_self: %w", err)
	}
	return nil
}

// dropCaps empties the calling thread's capability sets, as bwrap's
// --cap-drop ALL does: the bounding set (when the thread may, that is
// holds CAP_SETPCAP), the ambient set, then effective, permitted and
// inheritable. A command it starts, even as root, then holds none.
func dropCaps() error {
	if hasCap(unix.CAP_SETPCAP) {
		for c := 0; ; c++ {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
				if errors.Is(err, unix.EINVAL) {
					break // past the last capability the kernel knows
				}
				return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
			}
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear the ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	if err := unix.Capset(&hdr, &none[0]); err != nil {
		return fmt.Errorf("drop every capability: %w", err)
	}
	return nil
}

// hasCap reports whether the calling thread holds capability c, effective.
func hasCap(c int) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[c/32].Effective&(1<<(uint(c)%32)) != 0
}

// landlockNetNone says how the landlock sandbox takes the network away
// here: a network namespace of its own when it may make one (netns, with
// CAP_SYS_ADMIN: agentd runs as root), and Landlock's TCP rules (ABI 4+).
// Neither is an error wrapping ErrUnavailable: terminal.network none is
// then refused rather than quietly left open.
func landlockNetNone() (netns bool, err error) {
	netns = hasCap(unix.CAP_SYS_ADMIN)
	if netns || ABI() >= 4 {
		return netns, nil
	}
	return false, fmt.Errorf("%w: terminal.network is none, and the landlock sandbox cannot take the network away here: "+
		"agentd may not make a network namespace (no CAP_SYS_ADMIN) and the kernel's Landlock ABI %d has no TCP rules (4+); "+
		"use terminal.sandbox: bwrap, or let the operator set terminal.network: host", ErrUnavailable, ABI())
}

// ABI is the kernel's Landlock ABI version, 0 without Landlock.
func ABI() int {
	v, err := ll.LandlockGetABIVersion()
	if err != nil {
		return 0
	}
	return v
}

func probeLandlock() error {
	v := ABI()
	if v < 1 {
		return fmt.Errorf("%w: landlock: the kernel has no Landlock (Linux 5.13+ with CONFIG_SECURITY_LANDLOCK and landlock in the lsm= boot list)", ErrUnavailable)
	}
	return nil
}

// launchSpec is the launcher's argument (JSON): paths and descriptors
// only, never the environment (an argv is world-readable in /proc).
type launchSpec struct {
	Landlock bool     `json:"landlock"`
	Contain  bool     `json:"contain"`
	Parent   int      `json:"parent"`
	RODirs   []string `json:"ro_dirs,omitempty"`
	ROFiles  []string `json:"ro_files,omitempty"`
	RWDirs   []string `json:"rw_dirs,omitempty"`
	RWFiles  []string `json:"rw_files,omitempty"`
	ShowProc bool     `json:"show_proc,omitempty"`
	// RWDirFDs are read-write folders the launcher holds open (the
	// workdirs agentd opened and judged): the rules are added from these
	// descriptors, never by a path that could have been swapped since.
	RWDirFDs []int `json:"rw_dir_fds,omitempty"`
	// EnvFD, when set, is a descriptor of the command's environment
	// (envBlock): the keeper reads it and gives it to the command alone.
	// The launcher's own environment is then agentd's allow-list
	// (outerenv), never a tenant's.
	EnvFD int `json:"env_fd,omitempty"`
	// NoNet takes the network away (terminal.network none): a network
	// namespace of its own when the launcher may make one, and Landlock's
	// TCP rules (ABI 4+) with nothing allowed.
	NoNet bool `json:"no_net,omitempty"`
	Tmp   bool `json:"tmp"`
	// TmpRoot is where the private tmp is made (Policy.TmpRoot).
	TmpRoot string `json:"tmp_root,omitempty"`
	// Keeper is set in the second stage: the launcher agentd started (the
	// first stage) re-executes itself as the keeper, in a session of its
	// own, so that a kill of the first stage's process group or session
	// still leaves the keeper to end the tree.
	Keeper bool `json:"keeper,omitempty"`
}

// inherited are the descriptors the first stage passes to the keeper.
func (s launchSpec) inherited() []int {
	fds := append([]int{}, s.RWDirFDs...)
	if s.EnvFD > 0 {
		fds = append(fds, s.EnvFD)
	}
	return fds
}

// launcher is `agentd sandbox-exec SPEC -- argv`; envFD >= 0 is the
// descriptor the command's environment comes on.
func (p Policy) launcher(landlock bool, argv []string, binds []workBind, envFD int) []string {
	s := launchSpec{Landlock: landlock, Contain: !p.NoContain, Parent: os.Getpid(), Tmp: landlock, ShowProc: p.SharedPID,
		NoNet: landlock && p.Network == NetNone, EnvFD: max(envFD, 0)}
	if landlock {
		s.TmpRoot = cmp.Or(p.TmpRoot, os.TempDir())
	}
	if landlock {
		for _, d := range SystemDirs {
			if _, err := os.Stat(d); err == nil {
				s.RODirs = append(s.RODirs, d)
			}
		}
		s.RWFiles = append(s.RWFiles, "/dev/null", "/dev/zero", "/dev/full", "/dev/tty")
		s.ROFiles = append(s.ROFiles, "/dev/urandom", "/dev/random")
		s.RWDirs, s.RWFiles = homeRules(p.Home, p.Hide, s.RWDirs, s.RWFiles)
		for _, b := range binds {
			if b.fd >= 0 {
				s.RWDirFDs = append(s.RWDirFDs, b.fd)
			} else {
				s.RWDirs = append(s.RWDirs, b.dest)
			}
		}
		s.ROFiles = append(s.ROFiles, p.ReadOnly...)
	}
	b, _ := json.Marshal(s)
	out := append(append([]string{}, p.Self...), LauncherCommand, string(b), "--")
	return append(out, argv...)
}

// HomeStamp names the entries a command started now would be granted of
// the home one by one, each as the file it is: under Landlock, a home with
// a hidden folder beneath it (the launch home) is granted entry by entry,
// and Landlock holds each entry's inode, not its path. An entry the server
// adds, or writes anew by a rename over it (config.set's config.yaml,
// model.save_key's .env), is out of reach of a command started before. A
// caller that keeps a command running (a persistent shell) starts it again
// once the stamp has changed. "" where the home is granted whole (no hidden
// folder beneath it, or bubblewrap's bind).
func (p Policy) HomeStamp() string {
	mode := p.Mode
	if mode == Auto || mode == "" {
		mode, _ = Effective(Auto)
	}
	if mode != Landlock || p.Home == "" {
		return ""
	}
	dirs, files := homeRules(p.Home, p.Hide, nil, nil)
	if len(files) == 0 && len(dirs) == 1 && dirs[0] == p.Home {
		return ""
	}
	var b strings.Builder
	for _, path := range append(dirs, files...) {
		fi, err := os.Lstat(path)
		if err != nil {
			continue // gone since the listing: the next stamp lists it no more
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			fmt.Fprintf(&b, "%s %d:%d\n", filepath.Base(path), st.Dev, st.Ino)
		}
	}
	return b.String()
}

// homeRules grants home read-write; a home with a hidden folder beneath it
// (the launch home's profiles) is granted entry by entry instead, since
// Landlock only ever adds access down a tree.
func homeRules(home string, hide, dirs, files []string) ([]string, []string) {
	var hidden []string
	for _, h := range hide {
		if within(h, home) && h != home {
			hidden = append(hidden, h)
		}
	}
	if len(hidden) == 0 {
		return append(dirs, home), files
	}
	entries, err := os.ReadDir(home)
	if err != nil {
		return dirs, files
	}
	for _, e := range entries {
		path := filepath.Join(home, e.Name())
		skip := false
		for _, h := range hidden {
			if within(h, path) {
				skip = true // the hidden folder or an ancestor of it
			}
		}
		switch {
		case skip:
		case e.IsDir():
			dirs = append(dirs, path)
		case e.Type().IsRegular():
			files = append(files, path)
		}
	}
	return dirs, files
}
