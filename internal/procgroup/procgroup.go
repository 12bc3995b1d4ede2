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
	"strconv"
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
	st, ok := readStat(pid)
	return ok && st.live()
}

// GroupMembers lists the live pids whose process group is pgid, read from
// /proc. It lets a test prove a group is empty after a kill.
func GroupMembers(pgid int) []int {
	return members(func(st procStat) bool { return st.pgrp == pgid })
}

// SessionMembers lists the live pids whose session is sid: a shell started
// with setsid leads its own session, and whatever it starts stays in it
// even in process groups of its own.
func SessionMembers(sid int) []int {
	return members(func(st procStat) bool { return st.session == sid })
}

// KillSession sends SIGKILL to the group sid leads and to every other live
// member of session sid.
func KillSession(sid int) {
	if sid <= 0 {
		return
	}
	_ = syscall.Kill(-sid, syscall.SIGKILL)
	for _, pid := range SessionMembers(sid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// procStat is the part of /proc/PID/stat this package reads.
type procStat struct {
	state      byte
	ppid, pgrp int
	session    int
}

// readStat parses /proc/pid/stat; the state follows the parenthesised
// command name, which may itself contain ") ", so it cuts at the last one.
func readStat(pid int) (procStat, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, false
	}
	s := string(data)
	i := strings.LastIndex(s, ") ")
	if i < 0 {
		return procStat{}, false
	}
	var st procStat
	if _, err := fmt.Sscanf(s[i+2:], "%c %d %d %d", &st.state, &st.ppid, &st.pgrp, &st.session); err != nil {
		return procStat{}, false
	}
	return st, true
}

func (st procStat) live() bool { return st.state != 'Z' && st.state != 'X' }

// pids lists every pid in /proc.
func pids() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]int, 0, len(entries))
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out
}

// members lists the live pids whose stat satisfies match.
func members(match func(procStat) bool) []int {
	var out []int
	for _, pid := range pids() {
		if st, ok := readStat(pid); ok && st.live() && match(st) {
			out = append(out, pid)
		}
	}
	return out
}
