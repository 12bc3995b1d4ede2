package host

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

// keeperEnv marks the plugin host a keeper started ("inner"), or one whose
// launcher's PID namespace does the keeper's work (keeperPIDNamespace,
// Config.OwnPIDNamespace). A host process started without it is the
// keeper: it runs no plugin code.
const keeperEnv = "AGENTD_PLUGIN_HOST_KEEPER"

// keeperPIDNamespace is keeperEnv's value for a host that needs no keeper.
const keeperPIDNamespace = "pid-namespace"

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER.
const prSetChildSubreaper = 36

// keep is the first process of a plugin host, the keeper. It makes itself
// a child subreaper (every process the host starts and orphans, a double
// fork or a setsid'd grandchild, becomes its child, not init's), runs the
// host proper as its child on the same protocol streams, and when that
// child exits for any reason (stdin closed, a crash, a limit) it kills
// everything left below it before it exits itself. So no process a plugin
// started outlives its host, with or without a PID namespace; and the
// parent, killing the host, kills the keeper's tree (see
// procgroup.KillTree) where every such process is still found.
func keep(stderr io.Writer) error {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		return fmt.Errorf("plugin host keeper: become a child subreaper: %w", e)
	}
	// The child's parent-death signal follows this thread.
	runtime.LockOSThread()
	exe, err := os.Executable()
	if err != nil {
		exe = "/proc/self/exe"
	}
	if _, err := os.Stat("/proc/self/exe"); err == nil {
		exe = "/proc/self/exe" // the same binary, even if its path was replaced
	}
	p, err := os.StartProcess(exe, os.Args, &os.ProcAttr{
		Env:   append(os.Environ(), keeperEnv+"=inner"),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return fmt.Errorf("plugin host keeper: start the host: %w", err)
	}
	// The keeper keeps no end of the protocol: the parent sees the stream
	// end when the host's ends.
	if null, err := syscall.Open(os.DevNull, syscall.O_RDWR|syscall.O_CLOEXEC, 0); err == nil {
		_ = syscall.Dup3(null, 0, 0)
		_ = syscall.Dup3(null, 1, 0)
		_ = syscall.Close(null)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		for s := range sigs {
			_ = p.Signal(s)
		}
	}()
	status, err := reapUntil(p.Pid)
	killed := procgroup.KillDescendants(os.Getpid())
	reapKilled(killed, keeperReapGrace)
	if err != nil {
		return fmt.Errorf("plugin host keeper: wait for the host (pid %d): %w", p.Pid, err)
	}
	if len(killed) > 0 {
		fmt.Fprintf(stderr, "plugin host keeper %d: the host (pid %d) ended (%s); killed %d processes it left: %v\n",
			os.Getpid(), p.Pid, describeStatus(status), len(killed), killed)
	}
	// The parent reads the host's end from the keeper's: the same code, or
	// the same signal.
	switch {
	case status.Exited():
		os.Exit(status.ExitStatus())
	case status.Signaled():
		signal.Reset(status.Signal())
		_ = syscall.Kill(os.Getpid(), status.Signal())
		os.Exit(128 + int(status.Signal()))
	}
	os.Exit(1)
	return nil
}

// reapUntil reaps children (orphans the keeper adopted among them) until
// pid exits, and returns pid's status.
func reapUntil(pid int) (syscall.WaitStatus, error) {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return ws, err
		}
		if got == pid {
			return ws, nil
		}
	}
}

// keeperReapGrace bounds how long a keeper waits for the processes it
// killed to be reaped (a SIGKILLed process in uninterruptible sleep).
const keeperReapGrace = 5 * time.Second

// reapKilled reaps children until every pid of killed is reaped, no child
// is left, or grace has passed. It never waits for a child it did not
// kill: one it could not see (a keeper inside agentd's Landlock sandbox
// may not read /proc, so it finds nothing to kill) would hold it forever,
// and the sandbox's own keeper above it, a subreaper that reads /proc from
// outside the sandbox, ends that tree as soon as this keeper exits.
func reapKilled(killed []int, grace time.Duration) {
	left := map[int]bool{}
	for _, pid := range killed {
		left[pid] = true
	}
	deadline := time.Now().Add(grace)
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return // ECHILD: none left
		case got > 0:
			delete(left, got)
			continue
		}
		for pid := range left {
			if syscall.Kill(pid, 0) == syscall.ESRCH {
				delete(left, pid) // reaped by its own parent, killed with it
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(5 * time.Millisecond) // a killed child is about to exit: poll its reaping
	}
}

func describeStatus(ws syscall.WaitStatus) string {
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		return "killed by " + ws.Signal().String()
	}
	return fmt.Sprintf("wait status %#x", uint32(ws))
}
