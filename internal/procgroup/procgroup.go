// Package procgroup starts children in process groups of their own and
// kills those groups, so that nothing a test, the harness or agentd spawns
// can outlive its owner.
//
//	cmd := procgroup.CommandContext(ctx, "bash")
//	_ = cmd.Start()
//	defer procgroup.Kill(cmd.Process.Pid)
package procgroup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
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
// member of session sid, and returns the members it found (the group's
// included): none means the session is empty.
func KillSession(sid int) []int {
	if sid <= 0 {
		return nil
	}
	_ = syscall.Kill(-sid, syscall.SIGKILL)
	found := SessionMembers(sid)
	for _, pid := range found {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return found
}

// EmptySession kills session sid's members until a look finds none (a
// member may be forking while a look scans, or not yet dead of its
// SIGKILL), or until within has passed, and reports whether the session
// emptied. Each look scans the whole process table, so the looks back off
// (2 ms doubling to 64 ms) rather than spin on a busy machine.
func EmptySession(sid int, within time.Duration) bool {
	wait := 2 * time.Millisecond
	for deadline := time.Now().Add(within); ; wait = min(2*wait, 64*time.Millisecond) {
		if len(KillSession(sid)) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(wait)
	}
}

// SessionOf returns the session id of the live process pid (false when it
// is gone or a zombie): a process that called setsid leads its own.
func SessionOf(pid int) (int, bool) {
	st, ok := readStat(pid)
	if !ok || !st.live() {
		return 0, false
	}
	return st.session, true
}

// procStat is the part of /proc/PID/stat this package reads.
type procStat struct {
	state      byte
	ppid, pgrp int
	session    int
}

// readStat parses /proc/pid/stat; the state follows the parenthesised
// command name, which may itself contain ") ", so it cuts at the last one.
// Every scan of the process table reads this file of every process, and
// a server scans it while it waits for a killed session to empty: one
// open and one read (the kernel hands a stat line over whole) into a
// buffer on the stack.
func readStat(pid int) (procStat, bool) {
	fd, err := syscall.Open("/proc/"+strconv.Itoa(pid)+"/stat", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return procStat{}, false
	}
	var buf [1024]byte // a stat line is about 300 bytes; its name is at most 64
	n, err := syscall.Read(fd, buf[:])
	for err == syscall.EINTR {
		n, err = syscall.Read(fd, buf[:])
	}
	syscall.Close(fd)
	if err != nil || n <= 0 {
		return procStat{}, false
	}
	return parseStat(buf[:n])
}

// parseStat reads the state, ppid, pgrp and session that follow the
// parenthesised command name, which may itself hold ") ": it cuts at the
// last one.
func parseStat(data []byte) (procStat, bool) {
	i := bytes.LastIndex(data, []byte(") "))
	if i < 0 || i+3 >= len(data) {
		return procStat{}, false
	}
	rest := data[i+2:]
	st := procStat{state: rest[0]}
	rest = rest[1:]
	for _, field := range []*int{&st.ppid, &st.pgrp, &st.session} {
		if len(rest) == 0 || rest[0] != ' ' {
			return procStat{}, false
		}
		rest = rest[1:]
		end := bytes.IndexByte(rest, ' ')
		if end < 0 {
			end = len(rest)
		}
		v, err := strconv.Atoi(string(rest[:end]))
		if err != nil {
			return procStat{}, false
		}
		*field, rest = v, rest[end:]
	}
	return st, true
}

func (st procStat) live() bool { return st.state != 'Z' && st.state != 'X' }

// others lists every pid in /proc but this process's, with the contents
// of its file name there (environ, cmdline, ...); a process whose file
// cannot be read (gone, or another user's) is left out. The contents are
// valid until the next step: one buffer serves every process.
func others(name string) iter.Seq2[int, []byte] {
	return func(yield func(int, []byte) bool) {
		self := os.Getpid()
		var buf []byte
		for _, pid := range pids() {
			if pid == self {
				continue
			}
			var err error
			if buf, err = readProc(pid, name, buf); err != nil {
				continue
			}
			if !yield(pid, buf) {
				return
			}
		}
	}
}

// readProc reads /proc/<pid>/<name> into buf (grown as needed) and
// returns what it holds. It speaks to the kernel directly: os.ReadFile
// also asks the file's flags, its size and the poller, and the escape
// checks read two such files of every process of the machine, every 50 ms
// (BenchmarkCarrying).
func readProc(pid int, name string, buf []byte) ([]byte, error) {
	fd, err := syscall.Open("/proc/"+strconv.Itoa(pid)+"/"+name, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return buf[:0], err
	}
	defer syscall.Close(fd)
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, make([]byte, max(4096, cap(buf)))...)[:len(buf)]
		}
		n, err := syscall.Read(fd, buf[len(buf):cap(buf)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return buf[:0], err
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

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
