package scenarios

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// The fair share, measured directly: one tenant (the spreader) runs
// spreadTurns turns at once, first over one connection, then over
// spreadConns connections, each turn in a session of its own (a session
// runs one turn at a time). Its provider holds every one of those model
// requests (shareGate), so the most held at once is the most turns the
// server runs for it at once: its share. A server whose share is per
// tenant runs as many over many connections as over one; one that counts
// per connection runs more. The count needs no latency threshold, so the
// scenario need not run alone.
const (
	spreadTurns = 32
	spreadConns = 8
	// spreadQuiet is how long the spreader's provider holds its requests
	// after the last one arrived: a server that has sent no new one for
	// that long runs no more at once, so the wave is let go. Each arrival
	// restarts it, so a server slow to start its turns still shows all it
	// runs at once.
	spreadQuiet = 400 * time.Millisecond
	// spreadHoldMax bounds one held request, whatever the harness does.
	spreadHoldMax = time.Minute
	// spreadPrompt marks the spreader's held turns.
	spreadPrompt = "Hold this turn for the fair-share count."
)

// shareGate holds the spreader's model requests in waves and counts them:
// a wave is let go when no request arrived for quiet, or when all want of
// the phase are in flight. It starts no goroutine of its own (a timer's
// function only closes the wave).
type shareGate struct {
	quiet time.Duration

	mu      sync.Mutex
	closed  bool
	want    int           // the phase's turns: all of them held lets the wave go at once
	held    int           // requests held now
	arrived int           // requests of the phase so far
	peak    int           // the most held at once in the phase
	wave    chan struct{} // closed to let go every request held now
	timer   *time.Timer
}

// shareGates holds each run's gate by its spreader (holdKey): the
// responder is made with the tenant set, before the run's phases.
var shareGates sync.Map // string -> *shareGate

// start begins a phase of want turns: its arrivals and peak count anew.
func (g *shareGate) start(want int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.want, g.arrived, g.peak = want, 0, 0
}

// counts is the phase's arrivals and peak so far.
func (g *shareGate) counts() (arrived, peak int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.arrived, g.peak
}

// hold holds one request until its wave is let go (or the gate closes, or
// spreadHoldMax passes).
func (g *shareGate) hold() {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	g.held++
	g.arrived++
	g.peak = max(g.peak, g.held)
	if g.wave == nil {
		g.wave = make(chan struct{})
	}
	w := g.wave
	if g.held >= g.want {
		g.letGoLocked()
	} else {
		n := g.arrived
		if g.timer != nil {
			g.timer.Stop()
		}
		g.timer = time.AfterFunc(g.quiet, func() { g.letGoIf(n) })
	}
	g.mu.Unlock()
	bound := time.NewTimer(spreadHoldMax)
	defer bound.Stop()
	select {
	case <-w:
	case <-bound.C:
	}
	g.mu.Lock()
	g.held--
	g.mu.Unlock()
}

// letGoIf lets the wave go if no request arrived since the n-th.
func (g *shareGate) letGoIf(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.arrived == n {
		g.letGoLocked()
	}
}

func (g *shareGate) letGoLocked() {
	if g.wave != nil {
		close(g.wave)
		g.wave = nil
	}
	if g.timer != nil {
		g.timer.Stop()
		g.timer = nil
	}
}

// close lets every held request go, and any later one through.
func (g *shareGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	g.letGoLocked()
}

// shareResponder holds a spread turn's request at the gate of its run,
// then answers it with text (no tool: no snapshot); every other request
// gets the default probe.
func shareResponder(t *tenants.Tenant) fakellm.Responder {
	def := tenants.DefaultResponder(t)
	return func(r fakellm.Record) fakellm.Response {
		if !strings.Contains(r.Turn().Text, spreadPrompt) {
			return def(r)
		}
		if v, ok := shareGates.Load(holdKey(t)); ok {
			v.(*shareGate).hold()
		}
		return fakellm.Text("held for the fair share")
	}
}

// spreadPeak is what one phase measured: the spreader's turns held at its
// provider at once, over conns connections.
type spreadPeak struct {
	Conns, Sessions, Peak int
}

func (p spreadPeak) String() string {
	return fmt.Sprintf("%d over %s (%d sessions each)", p.Peak, connections(p.Conns), p.Sessions)
}

// shareRun is one fair-share run: the spreader, its gate, and the peaks.
type shareRun struct {
	spreader *tenants.Tenant
	gate     *shareGate
	peaks    []spreadPeak
}

var shareKey = &stateKey[shareRun]{"fair-share"}

// setupShare opens every tenant's connection and session and the
// spreader's gate (the last tenant spreads). Providers the harness does
// not run (a staging roster's) cannot hold requests: the scenario skips.
func (e *Env) setupShare() {
	e.T.Helper()
	s := stateOf(e, shareKey)
	s.spreader = e.Tenants[len(e.Tenants)-1]
	if s.spreader.Provider == nil {
		e.T.Skipf("the tenants' providers run in another process: the spreader's requests cannot be held, so its turns in flight cannot be counted")
	}
	e.ServePerTenant()
	e.OpenSessions()
	s.gate = &shareGate{quiet: spreadQuiet}
	shareGates.Store(holdKey(s.spreader), s.gate)
	e.T.Cleanup(func() {
		s.gate.close()
		shareGates.Delete(holdKey(s.spreader))
	})
}

// spreadOver runs the spreader's spreadTurns turns at once over conns new
// connections, and while they run one probe turn of every neighbour,
// which must complete (the server still serves the others); it records
// the peak.
func (e *Env) spreadOver(conns int) {
	e.T.Helper()
	s := stateOf(e, shareKey)
	sp := s.spreader
	per := spreadTurns / conns
	type job struct {
		c   *harness.Conn
		sid string
	}
	var jobs []job
	for range conns {
		c := e.Dial(e.Server, sp)
		for range per {
			jobs = append(jobs, job{c, e.CreateSession(c, sp).SessionID})
		}
	}
	s.gate.start(len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	defer wg.Wait() // a phase that fails part-way still waits for its turns...
	ctx, cancel := e.ctx(2 * time.Minute)
	defer cancel() // ...which this ends first
	for i, j := range jobs {
		wg.Add(1)
		go func() { // ends with the turn, or ctx
			defer wg.Done()
			if _, err := j.c.Turn(ctx, j.sid, spreadPrompt); err != nil {
				errs[i] = fmt.Errorf("spread turn %d of %s over %d connection(s): %w", i, sp.Name, conns, err)
			}
		}()
	}
	// The control: once the spreader holds turns, every neighbour's turn
	// still completes.
	e.Eventually(sp.Name+"'s spread turns to reach its provider", time.Minute, func() (bool, string) {
		n, _ := s.gate.counts()
		return n > 0, fmt.Sprintf("%d of its %d turns at its provider", n, len(jobs))
	})
	e.neighboursTurn(sp, conns)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		e.T.Fatalf("%v", err)
	}
	_, peak := s.gate.counts()
	p := spreadPeak{Conns: conns, Sessions: per, Peak: peak}
	s.peaks = append(s.peaks, p)
	e.Logf("%s's turns in flight at its provider at once: %s", sp.Name, p)
}

// neighboursTurn runs one probe turn of every other tenant at once; one
// that fails is an availability finding against the spreader.
func (e *Env) neighboursTurn(sp *tenants.Tenant, conns int) {
	e.T.Helper()
	var wg sync.WaitGroup
	for _, t := range e.Tenants {
		if t == sp {
			continue
		}
		wg.Add(1)
		go func() { // ends with the turn, or its deadline
			defer wg.Done()
			e.ExpectSnapshots(t, 1)
			ctx, cancel := e.ctx(e.Times.Call)
			defer cancel()
			prompt, _ := probePrompt(t)
			if _, err := e.Conns[t.Name].Turn(ctx, e.Sessions[t.Name].SessionID, prompt); err != nil {
				e.ExpectSnapshots(t, -1)
				e.Find(invariants.Finding{Invariant: invariants.Availability, Tenant: t.Name, Owner: sp.Name, Kind: "spread",
					Where:  invariants.Where{Label: fmt.Sprintf("a turn of %s while %s spreads its turns over %d connection(s)", t.Name, sp.Name, conns)},
					Detail: "the turn did not complete: " + truncateText(err.Error(), 300)})
			}
		}()
	}
	wg.Wait()
}

// shareFindings judges the peaks of the spreader (the first over one
// connection, the rest over more): its turns in flight must not grow
// with its connections. No slack: a server whose share is per tenant runs
// no more at once over many connections (the gate holds a wave until the
// server sends no more), whatever its share is.
func shareFindings(spreader string, peaks []spreadPeak) []invariants.Finding {
	if len(peaks) < 2 {
		return nil
	}
	one := peaks[0]
	var out []invariants.Finding
	for _, p := range peaks[1:] {
		if p.Peak <= one.Peak {
			continue
		}
		out = append(out, invariants.Finding{Invariant: invariants.Availability, Tenant: spreader,
			Where: invariants.Where{Label: "spread turns at its provider"},
			Detail: fmt.Sprintf("%s's turns in flight grew from %d over %s to %d over %s: its share grows with its connections",
				spreader, one.Peak, connections(one.Conns), p.Peak, connections(p.Conns))})
	}
	return out
}

// connections is "1 connection" or "n connections".
func connections(n int) string {
	if n == 1 {
		return "1 connection"
	}
	return fmt.Sprintf("%d connections", n)
}

// checkShare adds the findings of the spread.
func (e *Env) checkShare() {
	e.T.Helper()
	s := stateOf(e, shareKey)
	for _, f := range shareFindings(s.spreader.Name, s.peaks) {
		e.Find(f)
	}
}

func fairShare() Spec {
	return Spec{
		ID:        "fair-share",
		Purpose:   "one tenant spreads its turns over one, then many connections; the most it runs at once must not grow with them, and its neighbours' turns complete meanwhile",
		Backends:  []harness.Backend{harness.BackendServe},
		Focus:     []Invariant{Availability, Requests},
		Snapshots: perTenant(2),
		Timeout:   5 * time.Minute,
		Responder: shareResponder,
		Phases: []Phase{
			{Name: "setup", Run: func(e *Env) { e.setupShare() }},
			{Name: "one-connection", Run: func(e *Env) { e.spreadOver(1) }},
			{Name: "many-connections", Run: func(e *Env) {
				e.spreadOver(spreadConns)
				e.checkShare()
			}},
		},
	}
}
