package surface

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

// Vars are the tenants' own variables (tenant -> name -> value): what the
// tenant's .env holds, which no process outside its sandbox should carry.
type Vars map[string]map[string]string

// namespaces are the namespace ids of a process that tell a sandbox.
type namespaces struct {
	user, mnt, pid string
}

func nsOf(pid int) (namespaces, error) {
	var ns namespaces
	for _, n := range []struct {
		name string
		to   *string
	}{{"user", &ns.user}, {"mnt", &ns.mnt}, {"pid", &ns.pid}} {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, n.name))
		if err != nil {
			return ns, err
		}
		*n.to = l
	}
	return ns, nil
}

// confinement judges a process against the server's namespaces: inside a
// sandbox when its user or mount namespace is not the server's (bwrap,
// a container) or no_new_privs is set (Landlock needs it, and /proc shows
// nothing else of Landlock).
func confinement(pid int, ref namespaces, status []byte) (bool, string) {
	ns, err := nsOf(pid)
	if err != nil {
		return false, fmt.Sprintf("namespaces unreadable (%v): counted as outside", err)
	}
	var own []string
	if ns.user != ref.user {
		own = append(own, "user")
	}
	if ns.mnt != ref.mnt {
		own = append(own, "mount")
	}
	if ns.pid != ref.pid {
		own = append(own, "pid")
	}
	if len(own) > 0 {
		return true, "own " + strings.Join(own, ", ") + " namespace"
	}
	if statusField(status, "NoNewPrivs") == "1" {
		return true, "no_new_privs in the server's namespaces (Landlock or seccomp; /proc cannot tell whether it was set before the program started)"
	}
	return false, "the server's namespaces, no no_new_privs"
}

// statusField is a field of /proc/PID/status.
func statusField(status []byte, name string) string {
	for _, line := range bytes.Split(status, []byte("\n")) {
		if k, v, ok := bytes.Cut(line, []byte(":")); ok && string(k) == name {
			return strings.TrimSpace(string(v))
		}
	}
	return ""
}

// identity tells a process from a later one that reuses its pid or one it
// became by exec.
type identity struct {
	pid   int
	start string
	comm  string
}

// readProc reads what the map keeps of pid; ok is false when it is gone.
func readProc(pid int, ref namespaces, vars Vars) (Proc, identity, bool) {
	dir := "/proc/" + strconv.Itoa(pid)
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return Proc{}, identity{}, false
	}
	id, ppid := parseStat(pid, stat)
	status, err := os.ReadFile(dir + "/status")
	if err != nil {
		return Proc{}, identity{}, false
	}
	p := Proc{PID: pid, Parent: ppid, Program: id.comm}
	if exe, err := os.Readlink(dir + "/exe"); err == nil {
		p.Program = filepath.Base(strings.TrimSuffix(exe, " (deleted)"))
	}
	if cmd, err := os.ReadFile(dir + "/cmdline"); err == nil {
		p.Argv = shortArgv(cmd)
	}
	p.Confined, p.How = confinement(pid, ref, status)
	env, err := os.ReadFile(dir + "/environ")
	if _, gone := os.Stat(dir + "/ns"); gone != nil {
		// It ended while it was read: nothing of it can be judged.
		return Proc{}, identity{}, false
	}
	if err != nil {
		p.Unreadable = err.Error()
	} else {
		p.env = splitNUL(env)
		p.Carries = carried(p.env, vars)
	}
	return p, id, true
}

// parseStat reads the identity and parent out of /proc/PID/stat (the
// command name may hold spaces and parentheses: cut at the last ')').
func parseStat(pid int, stat []byte) (identity, int) {
	id := identity{pid: pid}
	open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return id, 0
	}
	id.comm = string(stat[open+1 : end])
	f := strings.Fields(string(stat[end+1:]))
	// f[0] is the state, f[1] the parent, f[19] the start time.
	ppid := 0
	if len(f) > 1 {
		ppid, _ = strconv.Atoi(f[1])
	}
	if len(f) > 19 {
		id.start = f[19]
	}
	return id, ppid
}

func splitNUL(b []byte) []string {
	var out []string
	for _, e := range bytes.Split(b, []byte{0}) {
		if len(e) > 0 {
			out = append(out, string(e))
		}
	}
	return out
}

// shortArgv is a process's first three words, each at most 80 bytes: what
// names the program, never a whole command line (which may carry values).
func shortArgv(cmdline []byte) []string {
	words := splitNUL(cmdline)
	if len(words) > 3 {
		words = words[:3]
	}
	for i, w := range words {
		if len(w) > 80 {
			words[i] = w[:80] + "…"
		}
	}
	return words
}

// carried lists the tenant variables env holds: a tenant's name with its
// own value, or its value under any name.
func carried(env []string, vars Vars) []Carried {
	var out []Carried
	for _, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || value == "" {
			continue
		}
		for tenant, vs := range vars {
			for vn, vv := range vs {
				if vv == value && (vn == name || len(vv) >= 8) {
					out = append(out, Carried{Tenant: tenant, Name: name})
				}
			}
		}
	}
	return out
}

// sampleTree reads the processes at and below roots that seen does not hold
// yet (by identity), adding them to seen; ref is the first root's
// namespaces.
func sampleTree(roots []int, ref namespaces, vars Vars, seen map[identity]Proc) {
	all := append([]int(nil), roots...)
	for _, r := range roots {
		all = append(all, procgroup.Descendants(r)...)
	}
	for _, pid := range all {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		if id, _ := parseStat(pid, stat); hasIdentity(seen, id) {
			continue
		}
		p, id, ok := readProc(pid, ref, vars)
		if !ok {
			continue
		}
		p.Server = slices.Contains(roots, pid)
		seen[id] = p
	}
}

func hasIdentity(seen map[identity]Proc, id identity) bool {
	_, ok := seen[id]
	return ok
}

// ChildrenOf lists the pids of pids whose parent is parent, but those in
// skip: among a run's processes, the commands the harness started itself.
func ChildrenOf(parent int, pids []int, skip ...int) []int {
	var out []int
	for _, pid := range pids {
		if slices.Contains(skip, pid) {
			continue
		}
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		if _, ppid := parseStat(pid, stat); ppid == parent {
			out = append(out, pid)
		}
	}
	return out
}
