package scenarios

import (
	"context"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/remote"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/invariants"
)

// A running server the harness reaches through its target file's remote:
// block (harness/remote): its homes are pulled into the sandbox's before
// every scan, and every finding in them names the path on the server's
// host; its stop and start are commands; its processes a listing.

// pullHomes makes the sandbox's homes the running server's before a scan
// (nothing for a target whose homes are the sandbox's); a failure is a
// harness finding, so no scan passes on stale files.
func (e *Env) pullHomes(ctx context.Context) []invariants.Finding {
	if err := e.Box.PullHomes(ctx); err != nil {
		return []invariants.Finding{{Invariant: invariants.Harness, Detail: "read the server's homes: " + err.Error()}}
	}
	return nil
}

// remotePaths makes every finding's path in the sandbox's homes the path
// on the running server's host.
func (e *Env) remotePaths(fs []invariants.Finding) {
	if !e.Box.Target.RemoteFiles() {
		return
	}
	for i := range fs {
		if fs[i].Where.Path != "" {
			fs[i].Where.Path = e.Box.RemotePath(fs[i].Where.Path)
		}
	}
}

// pushHomes sends what a phase wrote in a home itself to the running
// server's host (nothing for a target whose homes are the sandbox's).
func (e *Env) pushHomes(what string) {
	e.T.Helper()
	ctx, cancel := e.ctx(e.Times.Call)
	defer cancel()
	if err := e.Box.PushHomes(ctx); err != nil {
		e.T.Fatalf("%s: %v", what, err)
	}
}

// filesUnreachable is why the harness cannot read the target's homes.
func (e *Env) filesUnreachable() string {
	if why := e.Box.Target.RemoteLacks("files"); why != "" && !e.Box.Target.IsGateway() {
		return "the target's files are not reachable from the harness: " + why
	}
	return e.filesSkipReason()
}

// live lists the processes carrying ev's canaries: read from /proc for a
// server the harness started, from remote.processes for a running one.
// A running server without it lists none, and the process checks are
// skipped, naming the field.
func (e *Env) live(ev invariants.Ended) []procgroup.Carrier {
	tg := e.Box.Target
	if tg.URL == "" {
		return invariants.Live(ev)
	}
	if why := tg.RemoteLacks("processes"); why != "" {
		e.skip(string(invariants.ProcessEscape), "the server's processes are not visible to the harness: "+why)
		return nil
	}
	ctx, cancel := e.ctx(e.Times.Call)
	defer cancel()
	ps, err := e.Box.RemoteProcesses(ctx)
	if err != nil {
		e.Find(invariants.Finding{Invariant: invariants.Harness, Detail: err.Error()})
		return nil
	}
	needles := make([]string, 0, len(ev.Canaries))
	for _, c := range ev.Canaries {
		needles = append(needles, c.Value)
	}
	return remote.Carrying(ps, needles)
}

// seesProcesses says why the process checks cannot run on this target
// ("" when they can).
func (e *Env) seesProcesses() string {
	if why := e.Box.Target.RemoteLacks("processes"); why != "" {
		return "the server's processes are not visible to the harness: " + why
	}
	return ""
}

// stopRemote stops a running server through remote.stop. A scenario
// that ends with it stopped starts it again as it ends: the next one
// finds it running, as the run found it.
func (e *Env) stopRemote() {
	e.T.Helper()
	ctx, cancel := e.ctx(e.Times.Stop + e.Times.Call)
	defer cancel()
	e.restartAtEnd()
	if err := e.Box.StopRemote(ctx); err != nil {
		e.T.Fatalf("%v", err)
	}
}

// restartAtEnd has the scenario start a running server again as it ends,
// when it ends with the server stopped (or crashed).
func (e *Env) restartAtEnd() {
	e.mu.Lock()
	first := !e.remoteRestartsAtEnd
	e.remoteRestartsAtEnd = true
	e.mu.Unlock()
	if first {
		e.T.Cleanup(func() {
			if !e.remoteStopped {
				return
			}
			ctx, cancel := context.WithTimeout(context.WithoutCancel(e.Ctx), e.Times.Ready+e.Times.Call)
			defer cancel()
			if err := e.Box.StartRemote(ctx); err != nil {
				e.T.Errorf("start the server again as the scenario ends: %v", err)
			}
		})
	}
}

// startRemote starts a running server again through remote.start.
func (e *Env) startRemote() {
	e.T.Helper()
	ctx, cancel := e.ctx(e.Times.Ready + e.Times.Call)
	defer cancel()
	if err := e.Box.StartRemote(ctx); err != nil {
		e.targetCannotStart(harness.BackendServe, err)
		e.T.Fatalf("%v", err)
	}
}
