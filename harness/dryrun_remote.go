package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tenantcanary/tenantcanary/harness/remote"
)

// dryRemote tries every command of a running server's remote: block once,
// each on its own line: pull (into a scratch folder under root), push
// (what was pulled, which writes nothing new), processes, exec (a harmless
// printf, its output checked), stop then start (with the health URL
// between), each replica_urls' health, reload. A command that fails is a FAIL
// line naming its field and why, and the others are still tried; it
// returns how many failed. wait bounds each command.
func dryRemote(ctx context.Context, t Target, root string, rep *DryReport, wait time.Duration) (failed int) {
	sp := t.Reach
	if sp == nil || t.URL == "" {
		return 0
	}
	try := func(field string, do func(ctx context.Context) (string, error)) {
		cctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		what, err := do(cctx)
		if err != nil {
			failed++
			_ = rep.Fail(field, "%v", err)
			return
		}
		rep.Step(field, "%s", what)
	}
	if sp.Files() {
		scratch := filepath.Join(root, "remote-check")
		m := &remote.Mirror{Spec: sp, Local: scratch}
		pulled := false
		try("remote.pull", func(ctx context.Context) (string, error) {
			if err := m.Pull(ctx); err != nil {
				return "", err
			}
			pulled = true
			return fmt.Sprintf("%s: %d file(s)", sp.Home, m.Pulled()), nil
		})
		try("remote.push", func(ctx context.Context) (string, error) {
			if !pulled {
				return "", fmt.Errorf("not tried: it pushes back what remote.pull read, and that failed")
			}
			if err := m.Push(ctx); err != nil {
				return "", err
			}
			return sp.Home + ": its folders pushed back as they were", nil
		})
		// The server's own folders (remote.shared), pulled as the
		// shared-place check pulls them.
		for i, folder := range sp.Shared {
			try(fmt.Sprintf("remote.shared[%d]", i), func(ctx context.Context) (string, error) {
				sm := &remote.Mirror{Spec: sp.WithHome(folder), Local: filepath.Join(scratch, "shared", strconv.Itoa(i))}
				if err := sm.Pull(ctx); err != nil {
					return "", err
				}
				return fmt.Sprintf("%s: %d file(s)", folder, sm.Pulled()), nil
			})
		}
		_ = os.RemoveAll(scratch)
	}
	if sp.ListsProcesses() {
		try("remote.processes", func(ctx context.Context) (string, error) {
			ps, err := remote.List(ctx, sp.Processes)
			if err != nil {
				return "", err
			}
			if len(ps) == 0 {
				return "", fmt.Errorf("it listed no process: the escape checks would see nothing")
			}
			return fmt.Sprintf("%d process(es) listed", len(ps)), nil
		})
	}
	if sp.Execs() {
		try("remote.exec", func(ctx context.Context) (string, error) {
			if err := sp.CheckExec(ctx); err != nil {
				return "", err
			}
			return "printf of a word holding quotes, $, a glob and a newline printed it back unchanged", nil
		})
	}
	if sp.CanRestart() {
		box := &Sandbox{Target: t}
		try("remote.stop", func(ctx context.Context) (string, error) {
			if err := box.StopRemote(ctx); err != nil {
				return "", err
			}
			return "the server stopped: " + sp.HealthURL(t.URL) + " no longer answers", nil
		})
		try("remote.start", func(ctx context.Context) (string, error) {
			if err := box.StartRemote(ctx); err != nil {
				return "", err
			}
			return "the server started: " + sp.HealthURL(t.URL) + " answered 200", nil
		})
	}
	// A staging cluster's other replicas (replica_urls): each answers its
	// health, after the restart above.
	for n := 2; n <= t.ReplicaCount() && len(t.ReplicaURLs) > 0; n++ {
		try(fmt.Sprintf("replica_urls[%d]", n-2), func(ctx context.Context) (string, error) {
			if err := t.ReplicaHealthy(ctx, n); err != nil {
				return "", err
			}
			return fmt.Sprintf("replica %d (%s) answers", n, t.ReplicaURL(n)), nil
		})
	}
	if len(sp.Reload) > 0 {
		try("remote.reload", func(ctx context.Context) (string, error) {
			if _, err := remote.Run(ctx, "remote.reload", sp.Reload, sp.Home, nil, nil); err != nil {
				return "", err
			}
			return "the server reloaded its plugins", nil
		})
	}
	return failed
}
