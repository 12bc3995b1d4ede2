package terminal

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

// KillSession sends SIGKILL to every process whose session id is sid (a
// shell started with setsid leads its own session), including those in
// process groups of their own.
func KillSession(sid int) {
	if sid <= 0 {
		return
	}
	_ = syscall.Kill(-sid, syscall.SIGKILL)
	for _, pid := range SessionMembers(sid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// SessionMembers lists the live (non-zombie) pids in session sid.
func SessionMembers(sid int) []int {
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
		var ppid, pgrp, session int
		if _, err := fmt.Sscanf(s[i+2:], "%c %d %d %d", &state, &ppid, &pgrp, &session); err != nil {
			continue
		}
		if session == sid && state != 'Z' && state != 'X' {
			out = append(out, pid)
		}
	}
	return out
}
