package scenarios

import (
	"fmt"
	"strings"
	"syscall"

	"github.com/tenantcanary/tenantcanary/harness/remote"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// The server's host beyond its homes, for the scenarios that reach into
// it (hostile-plugin's host deaths, hostile-restarts' crashes and host
// limits): this machine's /proc and signals for a server the harness
// started; remote.processes and remote.exec for a running one
// (harness.Sandbox's KillOnHost, ReadOnHost, ServerPids).

// killOnHost kills pids on the server's host; a failure is a harness
// finding (the check that needed the kill was not made as it should be).
func (e *Env) killOnHost(what string, pids ...int) {
	e.T.Helper()
	ctx, cancel := e.ctx(e.Times.Call)
	defer cancel()
	if err := e.Box.KillOnHost(ctx, syscall.SIGKILL, pids...); err != nil {
		e.Find(invariants.Finding{Invariant: invariants.Harness, Detail: what + ": " + err.Error()})
	}
}

// hostsOnServer lists t's live plugin hosts on the server's host, as
// pluginHostsOf does on this machine: for a running server, from
// remote.processes (remotePluginHostsOf). Their pids are the server
// host's: kill them with killOnHost, never with this machine's kill.
func (e *Env) hostsOnServer(t *tenants.Tenant) []procgroup.Carrier {
	e.T.Helper()
	if e.Box.Target.URL != "" {
		return e.remotePluginHostsOf(t)
	}
	return pluginHostsOf(e, t)
}

// remotePluginHostsOf is pluginHostsOf on a running server's host: the
// plugin hosts in remote.processes' listing whose environment is t's
// (its provider key, or its home on that host as the home variable), and
// none of their ancestors that is a host's launcher.
func (e *Env) remotePluginHostsOf(t *tenants.Tenant) []procgroup.Carrier {
	e.T.Helper()
	ctx, cancel := e.ctx(e.Times.Call)
	defer cancel()
	ps, err := e.Box.RemoteProcesses(ctx)
	if err != nil {
		e.Find(invariants.Finding{Invariant: invariants.Harness, Detail: "find the plugin hosts of " + t.Name + ": " + err.Error()})
		return nil
	}
	home := e.Box.Set.Layout.HomeVar + "=" + e.Box.RemotePath(t.Home)
	seen := map[int]bool{}
	var found []remote.Process
	for _, p := range ps {
		cmd := strings.Join(p.Cmdline, " ")
		if !e.probePlugin().IsHost(cmd) || seen[p.Pid] {
			continue
		}
		mine := strings.Contains(cmd, t.ProviderKey())
		for _, kv := range p.Env {
			mine = mine || kv == home || strings.Contains(kv, t.ProviderKey())
		}
		if mine {
			seen[p.Pid] = true
			found = append(found, p)
		}
	}
	parent := map[int]int{}
	for _, p := range ps {
		parent[p.Pid] = p.PPid
	}
	launcher := map[int]bool{} // a host runs below it
	for _, p := range found {
		for a, n := parent[p.Pid], 0; a > 1 && n < 64; a, n = parent[a], n+1 {
			if seen[a] {
				launcher[a] = true
			}
		}
	}
	var out []procgroup.Carrier
	for _, p := range found {
		if !launcher[p.Pid] {
			cmd := strings.Join(p.Cmdline, " ")
			comm := ""
			if len(p.Cmdline) > 0 {
				comm = p.Cmdline[0][strings.LastIndex(p.Cmdline[0], "/")+1:]
			}
			out = append(out, procgroup.Carrier{Pid: p.Pid, Comm: comm, Cmdline: cmd})
		}
	}
	return out
}

// crashRemote kills a running server at once on its host (the processes
// listening on its url's port, through remote.exec), as a crash or an OOM
// kill would, and waits until its health URL goes quiet; the next
// StartServe starts it through remote.start, and a scenario that ends
// with it down starts it again.
func (e *Env) crashRemote() {
	e.T.Helper()
	ctx, cancel := e.ctx(e.Times.Stop + e.Times.Call)
	defer cancel()
	pids, err := e.Box.ServerPids(ctx)
	if err != nil {
		e.T.Fatalf("crash the server: %v", err)
	}
	e.restartAtEnd()
	if err := e.Box.KillOnHost(ctx, syscall.SIGKILL, pids...); err != nil {
		e.T.Fatalf("crash the server: %v", err)
	}
	if err := e.Box.WaitRemoteDown(ctx); err != nil {
		e.T.Fatalf("crash the server (pid %v): %v", pids, err)
	}
	e.remoteStopped = true
}

// readOnHost reads a file of the server's host (a /proc file), up to
// limit bytes.
func (e *Env) readOnHost(path string, limit int64) ([]byte, error) {
	ctx, cancel := e.ctx(e.Times.Call)
	defer cancel()
	data, err := e.Box.ReadOnHost(ctx, path, limit)
	if err != nil {
		return nil, fmt.Errorf("read %s on the server's host: %w", path, err)
	}
	return data, nil
}

// carrierPids are the pids of ps (on the server's host).
func carrierPids(ps []procgroup.Carrier) []int {
	out := make([]int, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Pid)
	}
	return out
}
