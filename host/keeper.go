package host

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

// keeperEnv marks the plugin host a keeper started ("inner"). A host
// process started without it is the keeper: it runs no plugin code.
const keeperEnv = "AGENTD_PLUGIN_HOST_KEEPER"

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
	reapAll()
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

// reapAll reaps every child left, waiting for the ones just killed.
func reapAll() {
	for {
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return // ECHILD: none left
		}
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
