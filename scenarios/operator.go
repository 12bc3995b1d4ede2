package scenarios

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/remote"
	"github.com/tenantcanary/tenantcanary/invariants"
)

// noteOperatorSecret records a secret of the operator (the serve token)
// the scenario made: no tenant-visible place may carry it.
func (e *Env) noteOperatorSecret(kind, value string) {
	if value == "" {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.operator == nil {
		e.operator = map[string]string{}
	}
	for _, v := range e.operator {
		if v == value {
			return
		}
	}
	key := kind
	for i := 2; e.operator[key] != ""; i++ {
		key = fmt.Sprintf("%s_%d", kind, i)
	}
	e.operator[key] = value
}

// DialOperator opens a websocket connection with the operator's token (for
// operator work: creating and deleting profiles). No tenant owns it, so
// any tenant's canary on it is a finding.
func (e *Env) DialOperator(s *Serve) *harness.Conn {
	e.T.Helper()
	ctx, cancel := e.ctx(30 * time.Second)
	defer cancel()
	c, err := harness.DialWebsocket(ctx, s.Base, s.Token, e.Box.DialOptions()...)
	if err != nil {
		e.T.Fatalf("connect to serve backend as the operator: %v", err)
	}
	e.T.Cleanup(c.Close)
	e.own(nil, "websocket operator", c)
	return c
}

// detectChecks are the checks of issue 12 over what the run produced:
// the operator's secrets in every tenant-visible place, and every tenant's
// secrets in the shared places of the sandbox; with their positive
// controls (the operator scan sees the managed secret where it belongs;
// the shared places listed include the target's cwd and TMPDIR).
func (e *Env) detectChecks(ctx context.Context, chk *invariants.Checker, conns []ownedConn, texts []ownedText) ([]invariants.Finding, []Control) {
	secrets := map[string]string{}
	for k, v := range e.Box.Operator {
		secrets[k] = v
	}
	e.mu.Lock()
	for k, v := range e.operator {
		secrets[k] = v
	}
	e.mu.Unlock()
	var out []invariants.Finding
	op, err := invariants.NewOperator(secrets)
	if err != nil {
		return []invariants.Finding{{Invariant: invariants.Harness, Detail: err.Error()}}, nil
	}
	op.WithFileCache(e.fileCache())
	var controls []Control
	control := func(name string, ok bool, detail string) {
		c := Control{Tenant: invariants.OperatorOwner, Name: name, Passed: ok}
		if !ok {
			c.Detail = detail
			out = append(out, invariants.Finding{Invariant: invariants.Control, Tenant: invariants.OperatorOwner, Detail: name + ": " + detail})
		}
		controls = append(controls, c)
	}
	out = append(out, op.Requests(e.Box.Set.Tenants)...)
	for _, c := range conns {
		if c.owner == nil {
			continue // the operator's own connection
		}
		for i, f := range c.conn.Frames() {
			for _, fd := range op.Text(c.owner.Name, c.label, f.Raw) {
				fd.Where.Frame = &i
				out = append(out, fd)
			}
		}
	}
	for _, x := range texts {
		out = append(out, op.Text(x.owner, x.label, x.data)...)
	}
	if e.Box.Target.RemoteFiles() {
		// A running server's homes are mirrored; its cwd, TMPDIR and
		// system temp folder are on its host, which remote: does not reach.
		fs := op.Homes(ctx, e.Box.Set)
		if shared := e.Box.Target.Reach.Shared; len(shared) > 0 {
			// Its shared folders (remote.shared), pulled after the phase.
			places, err := e.Box.PullShared(ctx)
			if err != nil {
				fs = append(fs, invariants.Finding{Invariant: invariants.Harness, Detail: "the shared-place check: " + err.Error()})
			}
			control("every remote.shared folder was pulled", err == nil && len(places) == len(shared),
				fmt.Sprintf("pulled %d of %d (%v)", len(places), len(shared), err))
			fs = append(fs, chk.SharedPlaceLeaks(ctx, places)...)
		} else {
			e.skip(string(SharedPlace), "the server's cwd, TMPDIR and system temp folder are on its host, which remote: reaches only in its home folder: list them in "+remote.FieldShared)
		}
		e.remotePaths(fs)
		out = append(out, fs...)
	} else if e.Box.Target.Files && !e.Box.Target.Remote() {
		out = append(out, op.Homes(ctx, e.Box.Set)...)
		if v := e.Box.Operator["managed_secret"]; v != "" {
			path := strings.ReplaceAll(e.Box.Target.ManagedConfig, "{root}", e.Box.Root)
			data, err := os.ReadFile(path)
			control("operator scan sees the managed secret in the managed config", err == nil && len(op.Text("", path, data)) > 0,
				fmt.Sprintf("not seen in %s (%v)", path, err))
		}
		// The shared config holds every tenant's section by design: the
		// operator's file, no shared place; so do the server's declared
		// copies of it.
		// The stores' data folders are the store scan's (checkStores),
		// owner-aware: a tenant's secret in its own key is no leak.
		skip := append([]string{e.Box.Logs, e.Box.StoresDir()}, e.gatewayStoreFiles()...)
		if p := e.Box.SharedConfigPath(); p != "" {
			skip = append(skip, p)
			// And the server's own copies of it (shared_config.copies).
			skip = append(skip, e.Box.Target.SharedConfig.CopiesIn(e.Box.Root)...)
		}
		places := invariants.SharedPlaces(e.Box.Set, skip...)
		control("shared places include the target's cwd and TMPDIR", slices.Contains(places, e.Box.Cwd) && slices.Contains(places, e.Box.Tmp),
			fmt.Sprintf("listed: %v", places))
		// The server's own files in the launch home (server_files) are
		// nobody's home: a shared place.
		places = append(places, invariants.ServerFiles(e.Box.Set.LaunchHome, e.Box.Target.ServerFilesIn(e.Box.Root))...)
		out = append(out, chk.SharedPlaceLeaks(ctx, places)...)
		// The machine's temp folder: only entries the run can pin on the
		// target are listed, and one that cannot be read is not the
		// harness's failure (NewSystemTemp, SystemTempLeaks).
		sys, notScanned := chk.SystemTempLeaks(ctx, e.Box.NewSystemTemp())
		out = append(out, sys...)
		for _, n := range notScanned {
			e.skipRow(string(SharedPlace), "a new entry of the system temp folder could not be read, and is not surely the target's: "+n)
		}
	} else {
		e.skip(string(SharedPlace), e.sharedPlacesSkipReason())
	}
	return out, controls
}

// excerpt is the start of b on one line, for a finding's evidence.
func excerpt(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
