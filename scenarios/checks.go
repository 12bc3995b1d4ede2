package scenarios

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// ScopedWrite snapshots every home, runs write (addressed to tenant t),
// and checks that only the files of t matching expected (globs relative to
// its home) changed.
func (e *Env) ScopedWrite(what string, t *tenants.Tenant, expected []string, write func()) {
	e.T.Helper()
	if !e.Box.Target.Files {
		e.skip(string(WriteScope), "the target's files are not reachable from the harness")
		write()
		return
	}
	if fs := e.pullHomes(e.Ctx); fs != nil {
		e.T.Fatalf("snapshot homes before %s: %s", what, fs[0].Detail)
	}
	roots := e.scopeRoots()
	before, err := invariants.HashTree(e.Ctx, roots...)
	if err != nil {
		e.T.Fatalf("snapshot homes before %s: %v", what, err)
	}
	write()
	if fs := e.pullHomes(e.Ctx); fs != nil {
		e.T.Fatalf("snapshot homes after %s: %s", what, fs[0].Detail)
	}
	after, err := invariants.HashTree(e.Ctx, roots...)
	if err != nil {
		e.T.Fatalf("snapshot homes after %s: %v", what, err)
	}
	// The server's own files (server_files) change with any write.
	expected = append(expected, invariants.ServerFilePatterns(e.Box.Set.LaunchHome, e.Box.Target.ServerFilesIn(e.Box.Root))...)
	fs := invariants.WriteScopeChanges(e.Box.Set, t.Name, before, after, expected...)
	e.remotePaths(fs)
	e.mu.Lock()
	e.pending = append(e.pending, fs...)
	e.mu.Unlock()
}

// scopeRoots are the folders a write-scope snapshot covers: the launch
// home (the profiles' homes inside it) and the tenants' state root when
// the target keeps their state apart (layout.state_root), once it exists.
func (e *Env) scopeRoots() []string {
	roots := []string{e.Box.Set.LaunchHome}
	if sr := e.Box.Set.Layout.StateRootOf(e.Box.Set.Root); sr != "" {
		if _, err := os.Stat(sr); err == nil {
			roots = append(roots, sr)
		}
	}
	return roots
}

func (e *Env) skip(inv, reason string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.Report.Skipped {
		if s.Invariant == inv {
			return
		}
	}
	e.Report.Skipped = append(e.Report.Skipped, SkippedCheck{Invariant: inv, Reason: reason})
}

// checkAll runs every row of phaseChecks over what the run has produced
// so far.
func (e *Env) checkAll(ctx context.Context) ([]invariants.Finding, []Control, Counts) {
	chk, err := invariants.NewChecker(e.Box.Set.Tenants)
	if err != nil {
		return []invariants.Finding{{Invariant: invariants.Harness, Detail: err.Error()}}, nil, Counts{}
	}
	chk.WithFileCache(e.fileCache()).WithRequestCache(e.requestCache())
	r := e.newCheckRun(chk)
	r.find(e.pullHomes(ctx)...)
	for _, c := range phaseChecks {
		c.run(ctx, e, r)
	}
	e.remotePaths(r.findings)
	r.findings = invariants.Dedup(r.findings)
	r.counts.Findings = len(r.findings)
	return r.findings, r.controls, r.counts
}

// controls runs the positive controls tenant by tenant, so the report can
// list the ones that held as well as the ones that failed.
func (e *Env) controls(ctx context.Context, chk *invariants.Checker, conns []ownedConn) ([]Control, []invariants.Finding) {
	var out []Control
	var fs []invariants.Finding
	add := func(t *tenants.Tenant, name string, f []invariants.Finding) {
		c := Control{Tenant: t.Name, Name: name, Passed: len(f) == 0}
		if !c.Passed {
			c.Detail = f[0].Detail
		}
		out = append(out, c)
		fs = append(fs, f...)
	}
	e.mu.Lock()
	driven := map[string]bool{}
	for name, n := range e.expected {
		driven[name] = n > 0
	}
	deleted := map[string]bool{}
	for name := range e.deleted {
		deleted[name] = true
	}
	e.mu.Unlock()
	for _, t := range e.Box.Set.Tenants {
		if !t.HasProvider() || !driven[t.Name] {
			continue
		}
		one := []*tenants.Tenant{t}
		add(t, "own key on own provider", invariants.ControlKeys(one))
		if e.Box.Target.ToolEnvSource() == harness.ToolEnvNone {
			e.skipRow(string(PositiveControl), "own env marker in every own snapshot: the target gives its tools no per-tenant environment (tool_env: none)")
		} else {
			add(t, "own env marker in every own snapshot", invariants.ControlSnapshots(one))
		}
		if e.Box.Target.Files && !deleted[t.Name] {
			if e.Box.Set.Layout.StateDBName() == "" {
				e.skipRow(string(PositiveControl), "own session text in own state database: the target file names no state database (layout.state_db, layout.home_files.state)")
			} else {
				add(t, "own session text in own state database", chk.ControlStateDBIn(ctx, one, e.Box.Set.Layout))
			}
		}
	}
	for _, c := range conns {
		if c.owner == nil || !driven[c.owner.Name] {
			continue
		}
		if c.conn.Transport().Kind == harness.TransportChat {
			e.skip(string(PositiveControl), "own model in own frames: a chat stream names the server's model, not the tenant's (the scan of its chunks has no positive control)")
			continue
		}
		var all [][]byte
		for _, f := range c.conn.Frames() {
			all = append(all, f.Raw)
		}
		var f []invariants.Finding
		if !bytes.Contains(bytes.Join(all, nil), []byte(c.owner.Model())) {
			f = []invariants.Finding{{Invariant: invariants.Control, Tenant: c.owner.Name, Where: invariants.Where{Label: c.label},
				Detail: fmt.Sprintf("no frame on its own connection shows its own model (%d frame(s))", len(all))}}
		}
		add(c.owner, "own model in own frames ("+c.label+")", f)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Tenant < out[j].Tenant })
	return out, fs
}

func treeSize(root string) (files int, bytes int64) {
	_ = filepath.WalkDir(root, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				files++
				bytes += info.Size()
			}
		}
		return nil
	})
	return files, bytes
}
