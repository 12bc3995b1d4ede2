package procgroup

import (
	"errors"
	"syscall"
)

// Descendants lists the live pids below root (root excluded), read from the
// parent pids in /proc. A process that left its parent's group or session
// (setsid) is still found while its parent, or a subreaper above it, lives.
func Descendants(root int) []int {
	if root <= 0 {
		return nil
	}
	return below(childrenOf(), []int{root})
}

// childrenOf maps each live pid's parent to it.
func childrenOf() map[int][]int {
	children := map[int][]int{}
	for _, pid := range pids() {
		if st, ok := readStat(pid); ok && st.live() {
			children[st.ppid] = append(children[st.ppid], pid)
		}
	}
	return children
}

// below lists the pids under roots (roots excluded).
func below(children map[int][]int, roots []int) []int {
	var out []int
	queue := append([]int(nil), roots...)
	seen := map[int]bool{}
	for _, r := range roots {
		seen[r] = true
	}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
				queue = append(queue, c)
			}
		}
	}
	return out
}

// KillTree kills root, everything below it and the process group pgid (0:
// none). It first stops the tree with SIGSTOP, walking /proc again until a
// walk finds nothing new, so nothing forks or leaves the tree while it is
// being killed (an orphan goes to its nearest subreaper, which is stopped,
// not dead); then it sends SIGKILL to every process found. It returns the
// pids it killed besides root. A process that escaped the tree before the
// call (a double fork with no subreaper above it) is not found: only a PID
// namespace or a subreaper holds those.
func KillTree(root, pgid int) []int {
	if root <= 0 {
		if pgid > 0 {
			_ = Kill(pgid)
		}
		return nil
	}
	return killTree(root, true, pgid)
}

// KillDescendants kills everything below root, root itself spared, the
// same way (a subreaper cleaning up after its child calls it on itself).
func KillDescendants(root int) []int {
	if root <= 0 {
		return nil
	}
	return killTree(root, false, 0)
}

func killTree(root int, withRoot bool, pgid int) []int {
	found := map[int]bool{}
	stop := func(pid int) {
		if !found[pid] {
			found[pid] = true
			_ = syscall.Kill(pid, syscall.SIGSTOP)
		}
	}
	if withRoot {
		stop(root)
	}
	if pgid > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGSTOP)
		for _, pid := range GroupMembers(pgid) {
			found[pid] = true
		}
	}
	for range 64 {
		n := len(found)
		roots := []int{root}
		for pid := range found {
			roots = append(roots, pid)
		}
		for _, d := range below(childrenOf(), roots) {
			stop(d)
		}
		if len(found) == n {
			break
		}
	}
	if pgid > 0 {
		_ = Kill(pgid)
	}
	var killed []int
	for pid := range found {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			continue
		}
		if pid != root {
			killed = append(killed, pid)
		}
	}
	return killed
}
