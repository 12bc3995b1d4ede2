package scenarios

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/invariants/scan"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Env is the world one scenario drives: its sandbox and tenants, the
// target's processes and connections, and what the scenario has done so
// far (sessions, turns, writes), which the checks compare against. Its
// helpers fail the scenario themselves, so a phase reads as a story.
type Env struct {
	T       harness.T
	Ctx     context.Context
	Spec    Spec
	Box     *harness.Sandbox
	Tenants []*tenants.Tenant // every tenant, in the order the run's seed gives
	// Times are how long the scenario waits on the target: a turn, a
	// call, its ready line, its stop (harness.Target.TimesFor).
	Times  harness.Times
	Report *Report
	// Rand is the scenario's random source, drawn from the run's seed: use
	// it for every order and choice, so --seed replays the scenario.
	Rand *mrand.Rand

	// State the phases of one scenario share (set by the helpers that
	// make them): each tenant's main connection and session, and the
	// pooled server.
	Conns    map[string]*harness.Conn
	Sessions map[string]harness.SessionInfo
	Server   *Serve
	// remoteStopped: a phase stopped the running server (remote.stop);
	// StartServe starts it again.
	remoteStopped       bool
	remoteRestartsAtEnd bool // a cleanup starts it again if a phase left it stopped
	// Replicas are the serve processes of the target's cluster, Server
	// first (StartReplicas); none until a phase starts them.
	Replicas []*Serve

	state stateSlots // each scenario's own state, by key (stateOf)

	mu         sync.Mutex
	conns      []ownedConn
	sessions   []session
	expected   map[string]int           // snapshots each tenant's provider must have received
	pending    []invariants.Finding     // write-scope findings made since the last check
	down       *targetDown              // where a start-up failure of the target's backend is noted
	backendUp  bool                     // a backend of the target became ready in this scenario
	logScanned logMarks                 // how far each process log was scanned
	excl       *sync.RWMutex            // the run's scenarios hold it shared; Alone takes it whole
	texts      []ownedText              // streams the harness received (gateway replies)
	deleted    map[string]bool          // tenants whose profile a phase deleted
	operator   map[string]string        // the operator's secrets the scenario made (serve tokens)
	probePl    *harness.ProbePlugin     // the target's probe plugin (probePlugin)
	ranSt      ranState                 // the ran-controls since the last check
	faulty     faultyRun                // set in a self-test's faulty run that stops once caught
	files      *scan.FileCache          // what the file checks found, by file identity: a phase rescans only what changed
	requests   *invariants.RequestCache // what the request checks found, by request: a phase judges only the new ones
}

// fileCache is the scenario's file-scan cache (made on first use).
func (e *Env) fileCache() *scan.FileCache { return madeOnce(&e.mu, &e.files, scan.NewFileCache) }

// requestCache is the scenario's request-check cache (made on first use).
func (e *Env) requestCache() *invariants.RequestCache {
	return madeOnce(&e.mu, &e.requests, invariants.NewRequestCache)
}

// madeOnce is *p, made by mk on the first call; mu guards p.
func madeOnce[T any](mu *sync.Mutex, p **T, mk func() *T) *T {
	mu.Lock()
	defer mu.Unlock()
	if *p == nil {
		*p = mk()
	}
	return *p
}

type ownedConn struct {
	owner *tenants.Tenant // nil: a connection no single tenant owns
	label string
	conn  *harness.Conn
}

type ownedText struct {
	owner string // "" for a stream no single tenant owns
	label string
	data  []byte
}

// KeepText adds a stream the harness received to the text scan: with an
// owner, no other tenant's canary may be in it.
func (e *Env) KeepText(owner *tenants.Tenant, label string, data []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	name := ""
	if owner != nil {
		name = owner.Name
	}
	e.texts = append(e.texts, ownedText{owner: name, label: label, data: append([]byte(nil), data...)})
}

// MarkDeleted records that t's profile was deleted: its home is gone, so
// its state-database control no longer applies, and its sections leave
// the target's shared config, if it has one (Sandbox.DropTenant).
func (e *Env) MarkDeleted(t *tenants.Tenant) {
	e.mu.Lock()
	if e.deleted == nil {
		e.deleted = map[string]bool{}
	}
	e.deleted[t.Name] = true
	e.mu.Unlock()
	if err := e.Box.DropTenant(t); err != nil {
		e.T.Errorf("profile %s deleted: %v", t.Name, err)
	}
}

type session struct {
	tenant *tenants.Tenant
	info   harness.SessionInfo
}

// Tenant returns the tenant named name, failing the scenario if there is
// none.
func (e *Env) Tenant(name string) *tenants.Tenant {
	e.T.Helper()
	t := e.Box.Set.Get(name)
	if t == nil {
		e.T.Fatalf("no tenant %q in this run", name)
	}
	return t
}

// Launch is the launch tenant.
func (e *Env) Launch() *tenants.Tenant { return e.Box.Set.Launch() }

// profileParam is what addresses a tenant's profile on the wire: nothing
// for the launch profile, its name otherwise.
func profileParam(t *tenants.Tenant) string {
	if t.Launch {
		return ""
	}
	return t.Name
}

func (e *Env) ctx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(e.Ctx, d)
}

// own registers a connection and what it may carry.
func (e *Env) own(owner *tenants.Tenant, label string, c *harness.Conn) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.conns = append(e.conns, ownedConn{owner: owner, label: label, conn: c})
}

// StartStdio runs one stdio backend for owner and connects to it; every
// frame on it belongs to owner.
func (e *Env) StartStdio(owner *tenants.Tenant) *harness.Conn {
	e.T.Helper()
	ctx, cancel := e.ctx(e.Times.Ready)
	defer cancel()
	p, err := e.Box.StartStdio(e.Ctx, "stdio-"+owner.Name)
	if err != nil {
		e.targetCannotStart(harness.BackendStdio, err)
		e.T.Fatalf("start stdio backend for %s: %v", owner.Name, err)
	}
	c, err := harness.DialStdio(ctx, p, e.Box.DialOptions()...)
	if err != nil {
		// Dialing stdio is waiting for its ready event: any failure is one
		// of start-up; its reason is usually on the child's stderr.
		select {
		case <-p.Drained():
		case <-ctx.Done():
		}
		e.targetCannotStart(harness.BackendStdio, fmt.Errorf("%w: %w\nlast output:\n%s", harness.ErrNotReady, err, p.Tail()))
		e.T.Fatalf("connect to stdio backend of %s: %v", owner.Name, err)
	}
	e.targetReady()
	e.T.Cleanup(c.Close)
	e.own(owner, "stdio "+owner.Name, c)
	return c
}

// CreateSession opens a session of t's profile on c and records the model
// it reports (launch-bleed check).
func (e *Env) CreateSession(c *harness.Conn, t *tenants.Tenant) harness.SessionInfo {
	e.T.Helper()
	ctx, cancel := e.ctx(e.Times.Call)
	defer cancel()
	s, err := c.CreateSession(ctx, profileParam(t))
	if err != nil {
		e.SkipUnsupported(err)
		e.T.Fatalf("create session of %s: %v", t.Name, err)
	}
	e.mu.Lock()
	e.sessions = append(e.sessions, session{tenant: t, info: s})
	e.mu.Unlock()
	return s
}

// ResumeSession resumes a stored session of t on c.
func (e *Env) ResumeSession(c *harness.Conn, t *tenants.Tenant, storedID string) harness.SessionInfo {
	e.T.Helper()
	ctx, cancel := e.ctx(e.Times.Call)
	defer cancel()
	s, err := c.ResumeSession(ctx, storedID, profileParam(t))
	if err != nil {
		e.SkipUnsupported(err)
		e.T.Fatalf("resume session %s of %s: %v", storedID, t.Name, e.attributed(t, storedID, err))
	}
	e.mu.Lock()
	e.sessions = append(e.sessions, session{tenant: t, info: s})
	e.mu.Unlock()
	return s
}

// Turn runs one turn of t's session sid on c; the default responder makes
// it a probe, so t's provider must receive one more snapshot.
func (e *Env) Turn(c *harness.Conn, t *tenants.Tenant, sid string) {
	e.T.Helper()
	e.turnPrompt(c, t, sid)
}

// turnPrompt is Turn, returning the prompt it sent (its nonce makes it
// unique in the run).
func (e *Env) turnPrompt(c *harness.Conn, t *tenants.Tenant, sid string) string {
	e.T.Helper()
	e.ExpectSnapshots(t, 1)
	ctx, cancel := e.ctx(e.Times.Turn)
	defer cancel()
	prompt, nonce := probePrompt(t)
	if _, err := c.Turn(ctx, sid, prompt); err != nil {
		e.SkipUnsupported(err)
		e.T.Fatalf("turn of %s: %v", t.Name, e.attributed(t, sid, err))
	}
	if t.HasProvider() {
		e.proved(t, "the probe turn "+nonce, proveProbe(t, nonce))
	}
	return prompt
}

// Prompt runs one turn of t's session sid on c with text, expecting no
// snapshot of it (a turn whose tools are not the env probe).
func (e *Env) Prompt(c *harness.Conn, t *tenants.Tenant, sid, text string) {
	e.T.Helper()
	ctx, cancel := e.ctx(e.Times.Turn)
	defer cancel()
	if _, err := c.Turn(ctx, sid, text); err != nil {
		e.SkipUnsupported(err)
		e.T.Fatalf("turn of %s: %v", t.Name, e.attributed(t, sid, err))
	}
}

// Find adds a finding a phase made itself (a check only the scenario can
// make); it is reported with the phase's other findings.
func (e *Env) Find(f invariants.Finding) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pending = append(e.pending, f)
}

// ExpectSnapshots raises the number of snapshots t's provider must have
// received by n.
func (e *Env) ExpectSnapshots(t *tenants.Tenant, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.expected == nil {
		e.expected = map[string]int{}
	}
	e.expected[t.Name] += n
}

// Call makes one RPC and fails the scenario on any error.
func (e *Env) Call(c *harness.Conn, method string, params, result any) {
	e.T.Helper()
	ctx, cancel := e.ctx(e.Times.Call)
	defer cancel()
	if err := c.Call(ctx, method, params, result); err != nil {
		e.SkipUnsupported(err)
		e.T.Fatalf("%s: %v", method, err)
	}
}

// SkipUnsupported skips the scenario, with the target's reason, when err
// is an operation the target's dialect declares unsupported.
func (e *Env) SkipUnsupported(err error) {
	e.T.Helper()
	var u *harness.UnsupportedError
	if errors.As(err, &u) {
		e.T.Skipf("%v", u)
	}
}

// Eventually polls cond until it holds or the deadline passes, failing the
// scenario with what it waited for and the last state cond described.
func (e *Env) Eventually(what string, within time.Duration, cond func() (bool, string)) {
	e.T.Helper()
	if err := Await(e.Ctx, Wait{What: what, Within: within, Poll: 25 * time.Millisecond}, cond); err != nil {
		e.T.Fatalf("%v", err)
	}
}

// Logf logs to the scenario.
func (e *Env) Logf(format string, args ...any) { e.T.Logf(format, args...) }
