package scenarios

import (
	"context"
	"strings"

	"github.com/tenantcanary/tenantcanary/harness/remote"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// phaseCheck is one row of the checks run after every phase: what it
// checks, the invariants its findings name (each a row of invariants.All)
// and the check itself, which reads a checkRun and adds to it.
type phaseCheck struct {
	name   string
	covers []Invariant // nil: whatever the phase found itself (Env.Find)
	run    func(ctx context.Context, e *Env, r *checkRun)
}

// phaseChecks are every check of a phase, in the order their findings
// and controls are reported. checkAll loops over them; a new check is a
// new row.
var phaseChecks = []phaseCheck{
	{"requests on every provider", []Invariant{invariants.Request}, checkRequests},
	{"env snapshots", []Invariant{invariants.Snapshot}, checkSnapshots},
	{"snapshot liveness", []Invariant{invariants.Shortfall}, checkShortfall},
	{"files under every home", []Invariant{invariants.File, invariants.Harness}, checkFiles},
	{"process logs and kept streams", []Invariant{invariants.Text}, checkTexts},
	{"RPC frames", []Invariant{invariants.RPC}, checkFrames},
	{"what the phase found itself", nil, checkPending},
	{"launch bleed", []Invariant{invariants.LaunchBleed}, checkLaunchBleed},
	{"operator secrets and shared places", []Invariant{invariants.OperatorSecret, invariants.SharedPlace, invariants.Control, invariants.Harness}, checkOperator},
	{"shared stores (Redis keys, PostgreSQL rows)", []Invariant{invariants.TenantStore, invariants.SharedPlace, invariants.Control, invariants.Harness}, checkStores},
	{"gateway routing and shared store", []Invariant{invariants.Routing, invariants.SharedStore, invariants.Control, invariants.Harness}, checkGateway},
	{"turns the fake provider had to end", []Invariant{invariants.Harness}, checkLoops},
	{"positive controls", []Invariant{invariants.Control}, checkControls},
}

// checkRun is one run of phaseChecks: what the Env had recorded when it
// began (taken once, under the Env's lock), and what the rows found.
type checkRun struct {
	chk      *invariants.Checker // one matcher for every place: all are scanned for the same canaries
	tenants  []*tenants.Tenant
	expected map[string]int // snapshots each tenant's provider must have received
	conns    []ownedConn
	sessions []session
	pending  []invariants.Finding // found by the phase itself; taken, so reported once
	texts    []ownedText

	findings []invariants.Finding
	controls []Control
	counts   Counts
}

func (r *checkRun) find(fs ...invariants.Finding) { r.findings = append(r.findings, fs...) }

// newCheckRun takes what e has recorded so far.
func (e *Env) newCheckRun(chk *invariants.Checker) *checkRun {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := &checkRun{chk: chk, tenants: e.Box.Set.Tenants, expected: map[string]int{},
		conns:    append([]ownedConn(nil), e.conns...),
		sessions: append([]session(nil), e.sessions...),
		pending:  e.pending,
		texts:    append([]ownedText(nil), e.texts...),
	}
	for k, v := range e.expected {
		r.expected[k] = v
	}
	e.pending = nil
	return r
}

func checkRequests(_ context.Context, _ *Env, r *checkRun) {
	r.find(r.chk.RequestLeaks()...)
	for _, t := range r.tenants {
		if t.HasProvider() {
			r.counts.Requests += len(t.Requests())
		}
	}
}

func checkSnapshots(_ context.Context, _ *Env, r *checkRun) {
	r.find(r.chk.SnapshotLeaks()...)
	for _, t := range r.tenants {
		if t.HasProvider() {
			r.counts.Snapshots += len(invariants.EnvSnapshots(t, t.Requests()))
		}
	}
}

func checkShortfall(_ context.Context, _ *Env, r *checkRun) {
	for _, t := range r.tenants {
		if n := r.expected[t.Name]; n > 0 && t.HasProvider() {
			r.find(invariants.SnapshotShortfall([]*tenants.Tenant{t}, n)...)
		}
	}
}

func checkFiles(ctx context.Context, e *Env, r *checkRun) {
	if !e.Box.Target.HomesReachable() || e.Box.Target.IsGateway() {
		e.skip(string(invariants.File), e.filesUnreachable())
		return
	}
	r.find(r.chk.FileLeaks(ctx, e.Box.Set, invariants.ServerFiles(e.Box.Set.LaunchHome, e.Box.Target.ServerFilesIn(e.Box.Root))...)...)
	for _, root := range e.scopeRoots() {
		files, bytes := treeSize(root)
		r.counts.Files, r.counts.Bytes = r.counts.Files+files, r.counts.Bytes+bytes
	}
}

// checkTexts scans every process log the harness kept and every stream it
// received.
// checkTexts scans each process log from where the last phase's scan of
// it ended (a phase is credited only with the lines written during it),
// then the kept streams.
func checkTexts(ctx context.Context, e *Env, r *checkRun) {
	for _, p := range e.Box.Procs() {
		owner := ""
		if strings.HasPrefix(p.Name(), "stdio-") {
			owner = strings.TrimPrefix(p.Name(), "stdio-")
		}
		text := []byte(p.Output())
		scanLogFrom(r, "log of "+p.Name(), text, e.logScanned.since(p, text), owner)
	}
	checkRemoteLogs(ctx, e, r)
	for _, x := range r.texts {
		r.find(r.chk.TextLeaks(x.label, x.data, x.owner)...)
	}
}

// remoteLogLimit bounds how much of one log on a running server's host a
// phase reads.
const remoteLogLimit = 256 << 20

// checkRemoteLogs scans a running server's own logs on its host
// (remote.logs), each from where the last phase's scan ended; without
// them the check says which field would enable it.
func checkRemoteLogs(ctx context.Context, e *Env, r *checkRun) {
	tg := e.Box.Target
	if tg.URL == "" || tg.Reach == nil {
		return
	}
	if len(tg.Reach.Logs) == 0 {
		e.skip(string(invariants.Text), "the running server's own logs are on its host: list them in "+remote.FieldLogs+" (read with remote.exec)")
		return
	}
	for _, path := range tg.Reach.Logs {
		text, err := e.Box.ReadOnHost(ctx, path, remoteLogLimit)
		if err != nil {
			r.find(invariants.Finding{Invariant: invariants.Harness, Detail: "read the server's log " + path + ": " + err.Error()})
			continue
		}
		scanLogFrom(r, "log "+path+" on the server's host", text, e.logScanned.since(path, text), "")
	}
}

// scanLogFrom scans text, a log, from offset from on (what earlier phases
// scanned is theirs), each finding's offset counted from the log's start.
func scanLogFrom(r *checkRun, label string, text []byte, from int, owner string) {
	fs := r.chk.TextLeaks(label, text[from:], owner)
	for i := range fs {
		if off := fs[i].Where.Offset; off != nil {
			at := *off + int64(from)
			fs[i].Where.Offset = &at
		}
	}
	r.find(fs...)
}

func checkFrames(_ context.Context, _ *Env, r *checkRun) {
	for _, c := range r.conns {
		frames := c.conn.Frames()
		r.counts.Frames += len(frames)
		fr := make([]invariants.Frame, len(frames))
		for i, f := range frames {
			fr[i] = invariants.Frame{Data: f.Raw}
		}
		owner := ""
		if c.owner != nil {
			owner = c.owner.Name
		}
		r.find(r.chk.FrameLeaks(owner, c.label, fr)...)
	}
}

// checkPending reports what the phase found itself: its scoped writes
// (write_scope) and every check only a scenario can make (Env.Find).
func checkPending(_ context.Context, _ *Env, r *checkRun) { r.find(r.pending...) }

// checkLaunchBleed: every session reported its own profile's model.
func checkLaunchBleed(_ context.Context, e *Env, r *checkRun) {
	for _, s := range r.sessions {
		if s.info.NoModel != "" {
			e.skip(string(invariants.LaunchBleed), "info.model: "+s.info.NoModel)
			continue
		}
		r.find(invariants.LaunchBleedOf(r.tenants, s.tenant.Name, s.info.Info.Model, "session "+s.info.SessionID+" info.model")...)
	}
}

func checkOperator(ctx context.Context, e *Env, r *checkRun) {
	fs, cs := e.detectChecks(ctx, r.chk, r.conns, r.texts)
	r.find(fs...)
	r.controls = append(r.controls, cs...)
}

func checkGateway(ctx context.Context, e *Env, r *checkRun) {
	fs, cs := e.gatewayChecks(ctx, r.chk)
	r.find(fs...)
	r.controls = append(r.controls, cs...)
}

// checkLoops: a turn the fake provider had to end is one the target kept
// asking about after its tool results.
func checkLoops(_ context.Context, _ *Env, r *checkRun) { r.find(loopFindings(r.tenants)...) }

// checkControls runs the tenants' positive controls. The ran-controls and
// these lead the report's list, before the controls earlier rows made.
func checkControls(ctx context.Context, e *Env, r *checkRun) {
	own, fs := e.controls(ctx, r.chk, r.conns)
	r.controls = append(append(e.ranControls(), own...), r.controls...)
	r.find(fs...)
}
