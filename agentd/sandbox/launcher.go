package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
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
	env := os.Environ()
	var tmp string
	if spec.Tmp {
		d, err := os.MkdirTemp("", "agentd-tool-tmp-")
		if err != nil {
			return fail("private tmp: %v", err)
		}
		tmp = d
		defer os.RemoveAll(tmp)
		env = setEnv(env, "TMPDIR", tmp)
	}
	path, err := exec.LookPath(argv[0])
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
	runtime.LockOSThread() // the keeper's parent-death signal is tied to this thread
	if err := keeper.Start(); err != nil {
		return fail("start the keeper: %v", err)
	}
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

func setEnv(env []string, name, value string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return append(out, name+"="+value)
}

// restrictThread applies the spec's Landlock ruleset to the calling
// (locked) thread: read-only system dirs, read-write home, workdir and
// tmp, no /proc (unless the spec shows it), no signals or abstract
// sockets out of the domain.
func restrictThread(spec launchSpec, tmp string) error {
	cfg := landlock.Config{HandledAccessFS: landlock.V6.HandledAccessFS, Scoped: landlock.V6.Scoped}.BestEffort()
	rules := []landlock.Rule{
		landlock.RODirs(spec.RODirs...).IgnoreIfMissing(),
		landlock.ROFiles(spec.ROFiles...).IgnoreIfMissing(),
		landlock.RWDirs(spec.RWDirs...).WithRefer().IgnoreIfMissing(),
		landlock.RWFiles(spec.RWFiles...).WithIoctlDev().IgnoreIfMissing(),
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
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if err := ll.LandlockRestrictSelf(fd, flags); err != nil {
		return fmt.Errorf("landlock_restrict_self: %w", err)
	}
	return nil
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
