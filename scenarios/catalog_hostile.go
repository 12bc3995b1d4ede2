package scenarios

import (
	"slices"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// What the hostile scenarios share (hostile-tools, hostile-plugin and the
// multi-step ones): the attackers, their write canaries, and the steps.

// hostileSpec is s as a hostile scenario: on the pooled server, with the
// attack rows' responder (each tenant's model asks for the row's tool
// call).
func hostileSpec(s Spec) Spec {
	s.Backends = []harness.Backend{harness.BackendServe}
	s.Responder = attack.Responder
	return s
}

// maxAttackers is how many tenants of a run attack in a hostile scenario
// (the first ones, the launch tenant among them); the others are only
// victims, so a run with many tenants stays bounded in time.
const maxAttackers = 3

// attackers are the tenants that attack in a hostile scenario.
func (e *Env) attackers() []*tenants.Tenant {
	var out []*tenants.Tenant
	for _, t := range e.Tenants {
		if len(out) < maxAttackers && e.Sessions[t.Name].SessionID != "" {
			out = append(out, t)
		}
	}
	return out
}

// hostileState is what a hostile scenario keeps between phases: each
// tenant's write canary. It lives in each run's Env: the self-test runs
// the same spec clean and faulty at once.
type hostileState struct {
	mu     sync.Mutex // the attackers attack at once
	writes map[string]tenants.Canary
	// callEnders are the tenants whose terminal calls' processes the
	// target ends with the call (seen through attack.HeldSpawn).
	callEnders map[string]bool
}

func (st *hostileState) endsCalls(tenant string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.callEnders[tenant]
}

func (st *hostileState) setEndsCalls(tenant string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.callEnders == nil {
		st.callEnders = map[string]bool{}
	}
	st.callEnders[tenant] = true
}

// hostileKey is a hostile scenario's write canaries.
var hostileKey = &stateKey[hostileState]{"hostile"}

// hostileCanaries are t's canaries in this run's attacks: its write
// canary, minted on first use.
func (e *Env) hostileCanaries(t *tenants.Tenant) attack.Canaries {
	return stateOf(e, hostileKey).canaries(e, t)
}

func (st *hostileState) canaries(e *Env, t *tenants.Tenant) attack.Canaries {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.writes == nil {
		st.writes = map[string]tenants.Canary{}
	}
	w, ok := st.writes[t.Name]
	if !ok {
		w = e.mint(t, HostileWrite)
		st.writes[t.Name] = w
	}
	return attack.Canaries{Write: w.Value}
}

// nextTurns runs one probe turn of every tenant in a new session, all at
// once: what the others wrote into its home (SOUL.md, .env, memory)
// reaches its provider then, in the system prompt or the shell's
// environment.
func (e *Env) nextTurns() {
	e.T.Helper()
	e.atOnce(e.Tenants, func(t *tenants.Tenant) {
		c := e.Conns[t.Name]
		s := e.CreateSession(c, t)
		e.Turn(c, t, s.SessionID)
	})
}

// spawnIn runs every spawn row of rows as t in session sid on c with a
// fresh mark, proves the marked processes are seen, and returns the mark.
func (e *Env) spawnIn(c *harness.Conn, t *tenants.Tenant, sid string, rows []attack.Row, what string) tenants.Canary {
	e.T.Helper()
	mark := e.mint(t, EscapeMark)
	spawns := attack.Of(rows, attack.Spawn)
	for _, r := range spawns {
		e.Attack(c, t, sid, r, attack.Canaries{Mark: mark.Value})
	}
	st := stateOf(e, hostileKey)
	terminal := slices.ContainsFunc(spawns, isTerminalSpawn)
	switch {
	case !terminal:
		if !e.awaitMarked(mark, 15*time.Second) {
			e.markNotSeen(t, mark, what)
		}
		return mark
	case !st.endsCalls(t.Name) && e.awaitMarked(mark, time.Second):
		// A process that outlives its call is there when the call
		// returns: the first look finds it at once (or within a second on
		// a loaded machine).
		return mark
	}
	// None of the rows' processes was seen (or, seen before in this run,
	// none outlives a terminal call, so none was looked for): either the
	// target ends a terminal call's processes with the call (a sandbox in
	// a PID namespace of its own), or the check is blind, or they are slow
	// to show. A call that holds its marked process open tells which, and
	// how long a call's process takes to be seen here under this run's
	// load: the rows' processes get several times that (a second at least)
	// more to show before the target is taken to end them. They have had
	// the held call's seconds already.
	seen, within := e.seenWhileHeld(c, t, sid, mark)
	switch {
	case !seen:
		e.markNotSeen(t, mark, what)
	case st.endsCalls(t.Name):
	case e.awaitMarked(mark, max(time.Second, lateShowFactor*within)):
		// Slow to show, but they outlived their calls.
	default:
		st.setEndsCalls(t.Name)
		e.Logf("%s: the target ends a terminal call's processes with the call (a marked process was seen %s into a call that held it open, and none outlived a call): the escape check has nothing to see after a call", t.Name, within.Round(time.Millisecond))
	}
	return mark
}

// lateShowFactor is how many times the held call's time to show its
// process the rows' processes get, after that call, to show that they
// outlived their own calls.
const lateShowFactor = 5

// isTerminalSpawn reports whether r is one of the terminal's spawn rows.
func isTerminalSpawn(r attack.Row) bool {
	return slices.ContainsFunc(attack.Of(attack.Terminal(), attack.Spawn), func(t attack.Row) bool { return t.ID == r.ID })
}

// startHostile opens a hostile run: fresh attack state, install (when
// given) before the server starts, a connection and a session per tenant
// (opened at once: a session may start the tenant's plugin host), one
// ordinary turn each.
func (e *Env) startHostile(install func()) {
	e.T.Helper()
	*stateOf(e, hostileKey) = hostileState{}
	if install != nil {
		install()
	}
	e.ServePerTenant()
	e.openSessionsAtOnce()
	e.InterleavedTurns(1)
}

// openSessionsAtOnce is OpenSessions with every tenant's session.create at
// once.
func (e *Env) openSessionsAtOnce() {
	e.T.Helper()
	var mu sync.Mutex
	sessions := map[string]harness.SessionInfo{}
	e.atOnce(e.Tenants, func(t *tenants.Tenant) {
		s := e.CreateSession(e.Conns[t.Name], t)
		if got := s.Info.ProfileName; got != "" && got != t.Name {
			e.T.Errorf("session of %s reports profile %q", t.Name, got)
		}
		mu.Lock()
		sessions[t.Name] = s
		mu.Unlock()
	})
	e.Sessions = sessions
}

// attackAll has every attacker run, in its main session, the rows of each
// kind in turn; the attackers attack at once (each on its own connection,
// with its own canaries).
func (e *Env) attackAll(rows []attack.Row, kinds ...attack.Class) {
	e.T.Helper()
	if e.faulty.waitsForEscape() {
		e.Logf("the attack rows are not run: this faulty run waits for a process escape, which no row's result shows")
		return
	}
	e.atOnce(e.attackers(), func(t *tenants.Tenant) {
		for _, k := range kinds {
			for _, r := range attack.Of(rows, k) {
				if e.caughtBy(t) {
					e.Logf("%s's rows after its first hit are not run: this faulty run's fault is caught", t.Name)
					return
				}
				e.Attack(e.Conns[t.Name], t, e.Sessions[t.Name].SessionID, r, e.hostileCanaries(t))
			}
		}
	})
}

// stopAndCheck spawns in every attacker's main session (all at once),
// stops the server, and checks that nothing carrying any tenant's canary
// is left.
func (e *Env) stopAndCheck(rows []attack.Row) {
	e.T.Helper()
	e.atOnce(e.attackers(), func(t *tenants.Tenant) {
		e.spawnIn(e.Conns[t.Name], t, e.Sessions[t.Name].SessionID, rows, "processes of "+t.Name+" before the server stops")
	})
	e.StopServe(e.Server)
	e.CheckEscapes(invariants.Ended{Event: "the server's stop", Canaries: everyCanary(e.Box.Set.Tenants)})
}
