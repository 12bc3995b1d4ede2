// Package procgroup starts children in process groups of their own and
// kills those groups, so that nothing a test, the harness or agentd spawns
// can outlive its owner.
//
//	cmd := procgroup.CommandContext(ctx, "bash")
//	_ = cmd.Start()
//	defer procgroup.Kill(cmd.Process.Pid)
package procgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// Prepare makes cmd start as the leader of a new process group and die with
// the thread that started it (Linux's parent-death signal). For a command
// made with exec.CommandContext, use CommandContext instead, so that the
// context's end kills the whole group rather than the leader alone.
func Prepare(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// CommandContext is exec.CommandContext for a child in a group of its own
// (see Prepare) whose whole group is killed when ctx ends.
func CommandContext(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	Prepare(cmd)
	cmd.Cancel = func() error { return Kill(cmd.Process.Pid) }
	return cmd
}

// Kill sends SIGKILL to the process group led by pid. A group that is
// already gone is not an error.
func Kill(pgid int) error {
	return Signal(pgid, syscall.SIGKILL)
}

// Signal sends sig to the process group led by pgid. A group that is already
// gone is not an error.
func Signal(pgid int, sig syscall.Signal) error {
	if pgid <= 0 {
		return fmt.Errorf("signal process group %d: not a valid group id", pgid)
	}
	err := syscall.Kill(-pgid, sig)
	if err == nil || errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return fmt.Errorf("signal process group %d with %v: %w", pgid, sig, err)
}

// Alive reports whether pid names a live process: one that exists and is
// not a zombie waiting to be reaped.
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name, which may itself
	// contain ") ", so cut at the last one.
	s := string(stat)
	i := strings.LastIndex(s, ") ")
	if i < 0 || i+2 >= len(s) {
		return true
	}
	return s[i+2] != 'Z' && s[i+2] != 'X'
}

// GroupMembers lists the live pids whose process group is pgid, read from
// /proc. It lets a test prove a group is empty after a kill.
func GroupMembers(pgid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid <= 0 {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(stat)
		i := strings.LastIndex(s, ") ")
		if i < 0 {
			continue
		}
		var state byte
		var ppid, pg int
		if _, err := fmt.Sscanf(s[i+2:], "%c %d %d", &state, &ppid, &pg); err != nil {
			continue
		}
		if pg == pgid && state != 'Z' && state != 'X' {
			out = append(out, pid)
		}
	}
	return out
}
