package scenarios

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// The noisy neighbour's flood, bounded in count: FloodConns connections,
// FloodWorkers requests in flight on each, FloodRequests requests in all.
const (
	FloodConns    = 10
	FloodWorkers  = 2000
	FloodRequests = 40000
	// NeighbourTurns is how many turns each other tenant times in one
	// window, alone or under the flood.
	NeighbourTurns = 5
	// NoisyRounds is how many rounds (a window alone, then a window under
	// a fresh flood) the scenario runs at most: it stops once every
	// neighbour's verdict is decided (invariants.Latencies.Verdict), so a
	// fair server takes two rounds, a starving one often one.
	NoisyRounds = 3
)

// flooding is held by the one noisy-neighbour run of this process that
// may run its servers and floods: a flood of 20,000 requests loads the
// whole machine (the harness's own goroutines and a server with no limits
// swamped for minutes), so two runs at once (the catalog beside its
// positive control in one test binary, the self-test's two runs) time
// each other's floods, not their own. Held from before the run starts its
// servers until its phases and checks are done.
var flooding = make(chan struct{}, 1)

// holdFlooding takes flooding for the rest of e's run.
func (e *Env) holdFlooding() {
	e.T.Helper()
	select {
	case flooding <- struct{}{}:
	case <-e.Ctx.Done():
		e.T.Fatalf("waiting for another noisy-neighbour run of this process to end: %v", e.Ctx.Err())
	}
	e.T.Cleanup(func() { <-flooding }) // once the run's phases and checks are done
}

// flood is one tenant's flood of a pooled server: every worker opens a
// session and submits a turn on it, again and again, not waiting for the
// turns to end, until the budget is spent or the flood is stopped.
type flood struct {
	sent, refused, ok atomic.Int64
	submitting        atomic.Int64 // turns submitted, answered or not
	submitted         atomic.Int64 // turns the server took
	before            int          // the flooder's provider requests before it
	firstErr          atomic.Value
	stop              context.CancelFunc
	wg                sync.WaitGroup
}

// flooder is one tenant's means to flood, kept over the rounds: its
// FloodConns connections and the session each worker got (closed when its
// round settles: see settleFlood).
type flooder struct {
	tenant   *tenants.Tenant
	conns    []*harness.Conn
	sessions []string // by worker, "" for none yet
}

// dialFlood opens t's FloodConns flood connections. Every connection is
// open before any worker starts: a server the flood swamps must show it in
// the neighbours' turns, not in the flooder's own connection set-up.
func (e *Env) dialFlood(t *tenants.Tenant) *flooder {
	e.T.Helper()
	fl := &flooder{tenant: t, conns: make([]*harness.Conn, FloodConns), sessions: make([]string, FloodConns*FloodWorkers)}
	for i := range fl.conns {
		fl.conns[i] = e.Dial(e.Server, t)
	}
	return fl
}

// startFlood starts fl's flood. A round's workers own their session slot
// until the flood ends.
func (e *Env) startFlood(fl *flooder) *flood {
	e.T.Helper()
	ctx, cancel := context.WithCancel(e.Ctx)
	f := &flood{stop: cancel}
	var budget atomic.Int64
	budget.Store(FloodRequests)
	for ci, c := range fl.conns {
		for w := 0; w < FloodWorkers; w++ {
			slot := &fl.sessions[ci*FloodWorkers+w]
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				for n := 0; ctx.Err() == nil && budget.Add(-2) >= 0; n++ {
					if *slot == "" && !f.call(ctx, func(ctx context.Context) error {
						s, err := c.CreateSession(ctx, profileParam(fl.tenant))
						*slot = s.SessionID
						return err
					}) {
						continue
					}
					f.submitting.Add(1)
					if f.call(ctx, func(ctx context.Context) error {
						return c.Call(ctx, "prompt.submit", map[string]any{"session_id": *slot, "text": fmt.Sprintf("%s %d", attack.FloodPrompt, n)}, nil)
					}) {
						f.submitted.Add(1)
					}
				}
			}()
		}
	}
	return f
}

// call makes one flood request; a refusal (the server's limit) is counted,
// not an error of the scenario.
func (f *flood) call(ctx context.Context, do func(context.Context) error) bool {
	f.sent.Add(1)
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := do(cctx); err != nil {
		f.refused.Add(1)
		f.firstErr.CompareAndSwap(nil, err.Error())
		return false
	}
	f.ok.Add(1)
	return true
}

// end stops the flood and waits for its workers.
func (f *flood) end() {
	f.stop()
	f.wg.Wait()
}

// timeTurns runs n probe turns of t on its main session into l's last
// round, alone or under the flood (loaded), and counts the turns that
// failed. A baseline turn that fails is an error of the scenario
// (returned: it runs on a goroutine of its own).
func (e *Env) timeTurns(t *tenants.Tenant, n int, l *invariants.Latencies, loaded bool) error {
	e.T.Helper()
	r := &l.Rounds[len(l.Rounds)-1]
	for i := 0; i < n; i++ {
		e.ExpectSnapshots(t, 1)
		ctx, cancel := e.ctx(2 * time.Minute)
		start := time.Now()
		_, err := e.Conns[t.Name].Turn(ctx, e.Sessions[t.Name].SessionID, "Run the environment probe for "+t.Name+".")
		d := time.Since(start)
		cancel()
		switch {
		case err != nil && !loaded:
			e.ExpectSnapshots(t, -1)
			return fmt.Errorf("baseline turn of %s: %w", t.Name, err)
		case err != nil:
			e.ExpectSnapshots(t, -1)
			l.Failed++
			if l.FirstErr == "" {
				l.FirstErr = err.Error()
			}
		case loaded:
			r.Loaded = append(r.Loaded, d)
			// The window's p99 (of NeighbourTurns: its slowest turn) is now
			// Decisive past the round's limit, whatever the turns left
			// would take: a starved neighbour need not wait out the flood.
			if float64(d) >= invariants.Decisive*float64(invariants.Limit(invariants.P99(r.Baseline))) {
				return nil
			}
		default:
			r.Baseline = append(r.Baseline, d)
		}
	}
	return nil
}

// timeNeighbours times n turns of every tenant but the flooder, all at
// once, baseline (opening a new round) or loaded: both measurements run
// the neighbours concurrently, so that under the flood only the flood is
// new. It returns the harness's own probe times over the window (see
// probeMachine).
func (e *Env) timeNeighbours(n int, loaded bool) []time.Duration {
	e.T.Helper()
	neighbours := e.Tenants[:len(e.Tenants)-1]
	if !loaded {
		for _, t := range neighbours {
			l := e.noisy[t.Name]
			l.Rounds = append(l.Rounds, invariants.Round{})
		}
	}
	ctx, stop := context.WithCancel(e.Ctx)
	probe := make(chan []time.Duration, 1)
	go func() { probe <- probeMachine(ctx) }() // ends with stop, below
	errs := make([]error, len(neighbours))
	var wg sync.WaitGroup
	for i, t := range neighbours {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.timeTurns(t, n, e.noisy[t.Name], loaded)
		}()
	}
	wg.Wait()
	stop()
	probed := <-probe
	for _, err := range errs {
		if err != nil {
			e.T.Fatalf("%v", err)
		}
	}
	return probed
}

// probeEvery is how often probeMachine times its unit of work.
const probeEvery = 20 * time.Millisecond

// probeMachine times a fixed unit of CPU work in the harness's own
// process every probeEvery until ctx ends, from the tick it was due: what
// the machine (its cores, and the harness's own goroutines, the flood's
// among them) adds to a goroutine of the harness, whatever the server
// does. Under the flood over alone, it is the share of a neighbour's
// slowdown that is the machine's, not the server's.
func probeMachine(ctx context.Context) []time.Duration {
	buf := make([]byte, 64<<10)
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	var out []time.Duration
	for {
		select {
		case <-ctx.Done():
			return out
		case due := <-tick.C:
			sum := sha256.Sum256(buf)
			buf[0] = sum[0]
			out = append(out, time.Since(due))
		}
	}
}

// floodSwamped is how long a server may hold a turn of the flood it took
// without running it before the flood counts as on: a fair server runs one
// in a second or two, one the flood swamps has run none after minutes.
const floodSwamped = 20 * time.Second

// floodRound is one window under a fresh flood of fl: the
// flood is on, the neighbours time their turns into their last round. It
// returns the harness probe's times over the window and the flood, still
// running: end it, or settle it before the next round.
func (e *Env) floodRound(fl *flooder) (probed []time.Duration, f *flood) {
	e.T.Helper()
	flooder := fl.tenant
	before := len(flooder.Requests())
	f = e.startFlood(fl)
	f.before = before
	e.T.Cleanup(f.end) // on every path; a no-op once ended
	// The flood is on once every worker has a request in flight and
	// the server runs the flood's turns: one reached the flooder's
	// provider, or the server, handed one, is swamped (it has not run
	// it in floodSwamped). No more than that: a server the flood swamps
	// may take minutes per turn, and that must show as the neighbours'
	// starvation (a finding), not as a wait of the harness.
	start := time.Now()
	e.Eventually("the flood to reach "+flooder.Name+"'s provider", 2*time.Minute, func() (bool, string) {
		n := len(flooder.Requests()) - f.before
		sent, turns := f.sent.Load(), f.submitting.Load()
		return sent >= FloodConns*FloodWorkers && (n >= 1 || turns >= 1 && time.Since(start) >= floodSwamped),
			fmt.Sprintf("%d flood turn(s) at the provider, %d request(s) sent, %d of them turns", n, sent, turns)
	})
	return e.timeNeighbours(NeighbourTurns, true), f
}

// settleFlood lets f run out: every request of it answered, so none waits
// in the server any more, every turn it submitted at the flooder's
// provider, and its sessions closed. The next baseline window then carries
// nothing of it, and the next flood meets the server as this one did.
func (e *Env) settleFlood(fl *flooder, f *flood) {
	e.T.Helper()
	flooder := fl.tenant
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }() // ends with the workers
	timer := time.NewTimer(2 * time.Minute)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		f.end()
		e.T.Fatalf("waited 2m0s for the server to answer %s's flood; %d of %d request(s) answered", flooder.Name, f.ok.Load()+f.refused.Load(), f.sent.Load())
	case <-e.Ctx.Done():
		f.end()
		e.T.Fatalf("waiting for the server to answer %s's flood: %v", flooder.Name, e.Ctx.Err())
	}
	submitted := f.submitted.Load()
	e.Eventually("the flood's turns to reach "+flooder.Name+"'s provider", 2*time.Minute, func() (bool, string) {
		n := int64(len(flooder.Requests()) - f.before)
		return n >= submitted, fmt.Sprintf("%d of %d flood turn(s) at the provider", n, submitted)
	})
	e.closeFloodSessions(fl)
}

// closeFloodSessions closes every session fl's workers opened, one
// connection's at a time on each, so that the next round's flood meets the
// server as the first did (no session of the flooder's yet), not at its
// bound on a profile's sessions, a path of its own.
func (e *Env) closeFloodSessions(fl *flooder) {
	e.T.Helper()
	errs := make([]error, len(fl.conns))
	var wg sync.WaitGroup
	for ci, c := range fl.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w := 0; w < FloodWorkers && errs[ci] == nil; w++ {
				slot := &fl.sessions[ci*FloodWorkers+w]
				if *slot == "" {
					continue
				}
				ctx, cancel := e.ctx(time.Minute)
				if err := c.Call(ctx, "session.close", map[string]any{"session_id": *slot}, nil); err != nil {
					errs[ci] = fmt.Errorf("close %s's flood session %s: %w", fl.tenant.Name, *slot, err)
				}
				cancel()
				*slot = ""
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		e.T.Fatalf("%v", err)
	}
}

// logFlood logs what f sent and what came of it, in round r.
func (e *Env) logFlood(r int, flooder *tenants.Tenant, f *flood) {
	e.Logf("round %d: flood of %s: %d request(s) sent, %d answered, %d refused or cancelled (first: %v); %d turn(s) submitted, %d at its provider",
		r, flooder.Name, f.sent.Load(), f.ok.Load(), f.refused.Load(), f.firstErr.Load(), f.submitted.Load(), len(flooder.Requests())-f.before)
}

// noisyDecided reports whether every neighbour's verdict is decided.
func (e *Env) noisyDecided() bool {
	for _, l := range e.noisy {
		if _, _, decided := l.Verdict(NoisyRounds); !decided {
			return false
		}
	}
	return true
}

// logRound logs every neighbour's p99s in round r and the harness probe's
// median alone and under the flood.
func (e *Env) logRound(r int, alone, loaded []time.Duration) {
	e.T.Helper()
	a, l := invariants.Quantile(alone, 0.5), invariants.Quantile(loaded, 0.5)
	machine := 0.0
	if a > 0 {
		machine = float64(l) / float64(a)
	}
	e.Logf("round %d: the harness's probe took %v alone, %v under the flood (median, %.1fx): the machine's share", r,
		a.Round(time.Microsecond), l.Round(time.Microsecond), machine)
	for _, t := range e.Tenants[:len(e.Tenants)-1] {
		ps := e.noisy[t.Name].P99s()
		if len(ps) <= r {
			continue
		}
		p := ps[r]
		e.Logf("round %d: %s: baseline p99 %v, under the flood p99 %v (%.1fx, limit %v)", r, t.Name,
			p.Baseline.Round(time.Millisecond), p.Loaded.Round(time.Millisecond), p.Ratio(), p.Limit.Round(time.Millisecond))
	}
}

func noisyNeighbour() Spec {
	return Spec{
		ID:        "noisy-neighbour",
		Purpose:   "one tenant floods the pooled server with connections and requests; every other tenant's turns complete within 3x their baseline p99",
		Backends:  []harness.Backend{harness.BackendServe},
		Focus:     []Invariant{Availability, Requests},
		Snapshots: perTenant(2 * NeighbourTurns * NoisyRounds),
		Timeout:   MaxTimeout,
		Alone:     true,
		Responder: attack.Responder,
		Phases: []Phase{
			{Name: "setup", Run: func(e *Env) {
				e.holdFlooding()
				e.noisy = map[string]*invariants.Latencies{}
				e.ServePerTenant()
				e.OpenSessions()
				flooder := e.Tenants[len(e.Tenants)-1]
				for _, t := range e.Tenants[:len(e.Tenants)-1] {
					e.noisy[t.Name] = &invariants.Latencies{Tenant: t.Name, Flooder: flooder.Name}
				}
			}},
			{Name: "rounds", Run: func(e *Env) {
				// Rounds interleave a window alone and a window under a
				// fresh flood, so the machine's own load, which varies
				// over a run, weighs on both alike; they stop once every
				// neighbour's verdict is decided.
				flooder := e.Tenants[len(e.Tenants)-1]
				fl := e.dialFlood(flooder)
				for r := 0; r < NoisyRounds; r++ {
					alone := e.timeNeighbours(NeighbourTurns, false)
					loaded, f := e.floodRound(fl)
					e.logRound(r, alone, loaded)
					if e.noisyDecided() {
						f.end()
						e.logFlood(r, flooder, f)
						break
					}
					e.settleFlood(fl, f)
					e.logFlood(r, flooder, f)
				}
				for _, t := range e.Tenants[:len(e.Tenants)-1] {
					e.CheckAvailability(*e.noisy[t.Name])
				}
			}},
		},
	}
}
