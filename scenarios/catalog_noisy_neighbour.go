package scenarios

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/harness/flood"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// The noisy neighbour's flood: floodConns connections of one tenant,
// floodWorkers workers on each, every one keeping a turn of a session of
// its own running, back to back, and floodPipeline more session.create
// requests in flight on each that no worker waits on, in a process of its
// own (see harness/flood), for as long as the neighbours time their turns
// under it. A server without limits takes all 10,000 sessions at once and
// runs their turns for the whole window; one with them holds the flooder
// to its share (256 sessions, 4 turns running: agentd's defaults), refuses
// the rest once, and reads the pipelines no faster than it admits them.
// Fewer workers (3,000) let a fast agentd without limits clear the flood's
// sessions within the 1 s slack now and then; so did the workers alone
// once agentd's config loads got cheaper (7 of 15 rounds at 0.6 to 1.1 s
// against a 1.03 s limit): a worker's requests wait on their replies, so
// the faster a server answers them, the shallower its backlog. The
// pipelines keep it 20,000 requests deep whatever a request costs.
const (
	floodConns    = 10
	floodWorkers  = 1000
	floodPipeline = 1000
	// neighbourTurns is how many turns each other tenant times in one
	// window, alone or under the flood.
	neighbourTurns = 5
	// noisyRounds is how many rounds (a window alone, then a window under
	// a fresh flood) the scenario runs at most: it stops once every
	// neighbour's verdict is decided (invariants.Latencies.Judge), so a
	// fair server takes two rounds, a starving one often one.
	noisyRounds = 3
	// noisyMaxRounds is how many rounds the scenario runs at most when
	// rounds went unjudged (the machine control slowed past
	// invariants.MaxMachine, a moment of a saturated machine): an
	// undecided verdict gets more rounds while a majority of all the
	// rounds run can still agree, so one bad moment costs a round, not the
	// verdict. An unjudged round counts as a round that agrees with
	// neither side.
	noisyMaxRounds = 5
	// controlEvery is how often the machine control is probed in a
	// window: a window of a second holds 20 probes.
	controlEvery = 50 * time.Millisecond
)

// flooding is held by the one noisy-neighbour run of this process that
// may run its servers and floods: a flood loads the whole machine, so two
// runs at once (the catalog beside its positive control in one test
// binary, the self-test's two runs) time each other's floods, not their
// own. Held from before the run starts its servers until its phases and
// checks are done.
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

// noisyRun is one noisy-neighbour run: the flooder, the neighbours that
// time their turns, the machine control timed beside them, and the
// flood's spec.
type noisyRun struct {
	flooder    *tenants.Tenant
	neighbours []*neighbour
	control    *flood.Control
	spec       flood.Spec
}

// noisyKey is the noisy-neighbour run's flood and neighbours (per run: the
// self-test runs the spec twice at once).
var noisyKey = &stateKey[noisyRun]{"noisy-neighbour"}

// neighbour is one tenant timing its turns: its session ("" after a turn
// that was cut, which may still run: the next window opens a fresh one)
// and its latencies.
type neighbour struct {
	t   *tenants.Tenant
	sid string
	lat *invariants.Latencies
	cut int // turns under the flood cut at invariants.DecisiveAfter
}

// setupNoisy makes e's noisy run: the flood's spec for the last tenant (a
// target that runs session.create or prompt.submit as a hook cannot be
// flooded from a process of the harness's: the scenario is skipped, with
// the reason) and the machine control, started.
func (e *Env) setupNoisy() {
	e.T.Helper()
	n := stateOf(e, noisyKey)
	*n = noisyRun{flooder: e.Tenants[len(e.Tenants)-1]}
	dialect, err := flood.MarshalDialect(e.Box.Target.Dialect)
	if err != nil {
		e.T.Fatalf("%v", err)
	}
	token := e.Server.Token
	if e.Box.Target.TenantCredentials {
		token = n.flooder.APIServerKey()
	}
	n.spec = flood.Spec{Base: e.Server.Base, Token: token, Profile: profileParam(n.flooder), Dialect: dialect,
		Conns: floodConns, Workers: floodWorkers, Pipeline: floodPipeline, Prompt: attack.FloodPrompt}
	if err := n.spec.Check(); errors.Is(err, flood.ErrHook) {
		e.T.Skipf("the flood runs in a process of its own, which cannot run the target's hooks: %v", err)
	} else if err != nil {
		e.T.Fatalf("%v", err)
	}
	for _, t := range e.Tenants[:len(e.Tenants)-1] {
		lat := &invariants.Latencies{Tenant: t.Name, Flooder: n.flooder.Name}
		n.neighbours = append(n.neighbours, &neighbour{t: t, sid: e.Sessions[t.Name].SessionID, lat: lat})
	}
	n.control, err = flood.StartControl(e.Ctx, flood.ControlOptions{Marker: e.Box.RunID, LogPath: filepath.Join(e.Box.Logs, "flood-control.log")})
	if err != nil {
		e.T.Fatalf("start the machine control: %v", err)
	}
	e.T.Cleanup(func() { _ = n.control.Close() }) // on every path; closed and checked at the rounds' end
}

// warmUp runs one untimed probe turn of every neighbour, all at once: a
// session's first turn pays for what later turns reuse (its shell, the
// server's caches), which would slow the first baseline window only.
func (e *Env) warmUp() {
	e.T.Helper()
	n := stateOf(e, noisyKey)
	errs := make([]error, len(n.neighbours))
	var wg sync.WaitGroup
	for i, nb := range n.neighbours {
		wg.Add(1)
		go func() { // ends with the turn
			defer wg.Done()
			ctx, cancel := e.ctx(2 * time.Minute)
			defer cancel()
			errs[i] = e.warmTurn(ctx, nb)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		e.T.Fatalf("%v", err)
	}
}

// freshSession opens a session for nb, whose last one is busy with a turn
// that was cut, and warms it up with an untimed turn.
func (e *Env) freshSession(nb *neighbour) error {
	ctx, cancel := e.ctx(2 * time.Minute)
	defer cancel()
	s, err := e.Conns[nb.t.Name].CreateSession(ctx, profileParam(nb.t))
	if err != nil {
		return fmt.Errorf("a fresh session of %s after its turn was cut: %w", nb.t.Name, err)
	}
	e.mu.Lock()
	e.sessions = append(e.sessions, session{tenant: nb.t, info: s}) // its launch-bleed check
	e.mu.Unlock()
	nb.sid = s.SessionID
	return e.warmTurn(ctx, nb)
}

// warmTurn is one untimed probe turn of nb.
func (e *Env) warmTurn(ctx context.Context, nb *neighbour) error {
	e.ExpectSnapshots(nb.t, 1)
	if _, err := e.Conns[nb.t.Name].Turn(ctx, nb.sid, "Run the environment probe for "+nb.t.Name+"."); err != nil {
		e.ExpectSnapshots(nb.t, -1)
		return fmt.Errorf("warm-up turn of %s: %w", nb.t.Name, err)
	}
	return nil
}

// timeTurns runs n probe turns of nb into its last round, alone or under
// the flood (loaded), and counts the turns that failed. A baseline turn
// that fails is an error of the scenario (returned: it runs on a goroutine
// of its own). Under the flood, a starved neighbour need not wait out its
// window: a turn past invariants.OverAfter of the round's baseline ends
// it (the round is over its limit, whatever the turns left take), and a
// turn that reaches invariants.DecisiveAfter is cut there (its time a
// lower bound that decides the round alone).
func (e *Env) timeTurns(nb *neighbour, n int, loaded bool) error {
	t, l := nb.t, nb.lat
	r := &l.Rounds[len(l.Rounds)-1]
	if nb.sid == "" {
		if err := e.freshSession(nb); err != nil {
			return err
		}
	}
	for i := 0; i < n; i++ {
		e.ExpectSnapshots(t, 1)
		within := 2 * time.Minute
		if loaded {
			within = min(within, invariants.DecisiveAfter(invariants.P99(r.Baseline)))
		}
		ctx, cancel := e.ctx(within)
		start := time.Now()
		_, err := e.Conns[t.Name].Turn(ctx, nb.sid, "Run the environment probe for "+t.Name+".")
		d := time.Since(start)
		cut := loaded && errors.Is(ctx.Err(), context.DeadlineExceeded) && e.Ctx.Err() == nil
		cancel()
		switch {
		case cut:
			// The turn may still run, or never: it owes no snapshot, and
			// its session is busy, so the next round takes a fresh one
			// (once the flood is over: a server it swamps would keep
			// this one waiting too).
			e.ExpectSnapshots(t, -1)
			r.Loaded = append(r.Loaded, d)
			nb.cut++
			nb.sid = ""
			return nil
		case err != nil && !loaded:
			e.ExpectSnapshots(t, -1)
			return fmt.Errorf("baseline turn of %s: %w", t.Name, err)
		case err != nil && e.Ctx.Err() != nil:
			// The run stopped (its deadline, the test's): no failure of the
			// server's, and no availability finding.
			e.ExpectSnapshots(t, -1)
			return fmt.Errorf("turn of %s under the flood: the run stopped: %w", t.Name, e.Ctx.Err())
		case err != nil:
			e.ExpectSnapshots(t, -1)
			l.Failed++
			if l.FirstErr == "" {
				l.FirstErr = err.Error()
			}
		case loaded:
			r.Loaded = append(r.Loaded, d)
			if d > invariants.OverAfter(invariants.P99(r.Baseline)) {
				return nil // the round is over its limit whatever the turns left take
			}
		default:
			r.Baseline = append(r.Baseline, d)
		}
	}
	return nil
}

// timeNeighbours times neighbourTurns turns of every neighbour, all at
// once, baseline (opening a new round) or loaded: both windows run the
// neighbours concurrently, so that under the flood only the flood is new.
// The machine control is probed every controlEvery over the same window.
func (e *Env) timeNeighbours(loaded bool) {
	e.T.Helper()
	n := stateOf(e, noisyKey)
	if !loaded {
		for _, nb := range n.neighbours {
			nb.lat.Rounds = append(nb.lat.Rounds, invariants.Round{})
		}
	}
	ctx, stop := context.WithCancel(e.Ctx)
	defer stop()
	type sampled struct {
		ds  []time.Duration
		err error
	}
	probes := make(chan sampled, 1)
	go func() { // ends with stop, below
		ds, err := n.control.Sample(ctx, controlEvery, invariants.MinControlProbes)
		probes <- sampled{ds, err}
	}()
	errs := make([]error, len(n.neighbours))
	var wg sync.WaitGroup
	for i, nb := range n.neighbours {
		wg.Add(1)
		go func() { // ends with the neighbour's turns
			defer wg.Done()
			errs[i] = e.timeTurns(nb, neighbourTurns, loaded)
		}()
	}
	wg.Wait()
	stop()
	ctl := <-probes
	if err := errors.Join(append(errs, ctl.err)...); err != nil {
		e.T.Fatalf("%v", err)
	}
	for _, nb := range n.neighbours {
		r := &nb.lat.Rounds[len(nb.lat.Rounds)-1]
		if loaded {
			r.ControlLoaded = ctl.ds
		} else {
			r.ControlBaseline = ctl.ds
		}
	}
}

// floodSwamped is how long a server may take the flood without running
// one of its turns, or refusing one of its requests, before the flood
// counts as on: a fair server runs or refuses one in well under a second
// (the refusals of a connection flooding past its limits come slower and
// slower from agentd, its turns too), one the flood swamps may have run
// none for minutes, which must show as the neighbours' starvation (a
// finding), not as a wait of the harness; one that refuses every turn of
// the flood is flooded with refusals all the same.
const floodSwamped = 5 * time.Second

// startFlood starts round r's flooder process, held: it starts and opens
// its connections, which stay idle while the neighbours time their turns
// alone, and floods at floodRound. Its start (a process, its connections)
// is on neither window's clock.
func (e *Env) startFlood(r int) *flood.Flood {
	e.T.Helper()
	n := stateOf(e, noisyKey)
	spec := n.spec
	spec.Hold = true
	spec.Frames = filepath.Join(e.Box.Logs, fmt.Sprintf("flood-%d.frames", r))
	began := time.Now()
	f, err := flood.Start(e.Ctx, spec, flood.Options{Marker: e.Box.RunID, LogPath: filepath.Join(e.Box.Logs, fmt.Sprintf("flood-%d.log", r))})
	if err != nil {
		e.T.Fatalf("round %d: start %s's flood: %v", r, n.flooder.Name, err)
	}
	e.T.Cleanup(f.Kill) // on every path; a no-op once stopped
	ctx, cancel := e.ctx(2 * time.Minute)
	defer cancel()
	if _, err := f.Wait(ctx, "the flood's connections", func(c flood.Counts) bool { return c.Ready }); err != nil {
		e.T.Fatalf("round %d: %v", r, err)
	}
	e.Logf("round %d: the flood's process and connections ready in %v", r, time.Since(began).Round(time.Millisecond))
	return f
}

// floodRound is round r's window under f's flood: every one of its
// workers sends, the server runs the flood's turns (one reached the
// flooder's provider, or the server is swamped), the neighbours time their
// turns, and the flood stops: its process ends, its connections with it,
// and the server drops their sessions and turns.
func (e *Env) floodRound(r int, f *flood.Flood) {
	e.T.Helper()
	n := stateOf(e, noisyKey)
	fl := n.flooder
	ctx, cancel := e.ctx(2 * time.Minute)
	defer cancel()
	before := requestCount(fl)
	began := time.Now()
	if err := f.Go(); err != nil {
		e.T.Fatalf("round %d: %v", r, err)
	}
	workers := n.spec.Conns * n.spec.Workers
	if _, err := f.Wait(ctx, "every flood worker to send", func(c flood.Counts) bool { return c.Workers == workers }); err != nil {
		e.T.Fatalf("round %d: %v", r, err)
	}
	on := time.Now()
	e.Eventually("the flood to reach "+fl.Name+"'s provider, or its refusals", time.Minute, func() (bool, string) {
		got := requestCount(fl) - before
		c := f.Counts()
		return got >= 1 || c.Refused > 0 || time.Since(on) >= floodSwamped, fmt.Sprintf("%d flood turn(s) at the provider; the flood: %s", got, c)
	})
	at := time.Now()
	e.timeNeighbours(true)
	timed := time.Now()
	sctx, scancel := e.ctx(30 * time.Second)
	defer scancel()
	c, err := f.Stop(sctx)
	// Where a round's time goes, for a run kept with --keep (its run.log).
	e.Logf("round %d: every flood worker sending in %v, the flood at the provider %v later, the loaded window %v, the flood's stop %v",
		r, on.Sub(began).Round(time.Millisecond), at.Sub(on).Round(time.Millisecond), timed.Sub(at).Round(time.Millisecond), time.Since(timed).Round(time.Millisecond))
	e.KeepText(fl, fmt.Sprintf("output of %s's flood, round %d", fl.Name, r), []byte(f.Output()))
	if err != nil {
		e.T.Fatalf("round %d: stop %s's flood: %v", r, fl.Name, err)
	}
	// The flood's frames are scanned as the harness's own connections'
	// are: each belongs to the flooder.
	frames := filepath.Join(e.Box.Logs, fmt.Sprintf("flood-%d.frames", r))
	data, err := os.ReadFile(frames)
	if err != nil {
		e.T.Fatalf("round %d: read the flood's frames: %v", r, err)
	}
	e.KeepText(fl, fmt.Sprintf("frames of %s's flood connections, round %d", fl.Name, r), data)
	e.Logf("round %d: flood of %s: %s; %d request(s) at its provider", r, fl.Name, c, requestCount(fl)-before)
}

// requestCount is how many requests t's provider has received, without a
// copy of each (a flood's thousands, polled).
func requestCount(t *tenants.Tenant) int {
	if seq, ok := t.LastRequestSeq(); ok {
		return seq + 1
	}
	return 0
}

// The wait, before a round's baseline, for the server to be done with the
// last round's flood's turns: no request reaches the flooder's provider
// for drainQuiet. A server that runs a closed connection's turns on would
// otherwise slow the next baseline and so raise the limit it is judged
// by: a starving server would pass its later rounds by starving. Past
// drainWithin the round goes on (logged): such a server's baseline then
// says what it is like. The wait sees only work that reaches the
// provider: a server still busy with the closed connections' other
// requests (an agentd without limits creating their sessions) still
// slows the next baseline (240 ms after a 25 ms one, seen once).
const (
	drainQuiet  = 200 * time.Millisecond
	drainWithin = 5 * time.Second
)

// awaitDrained waits, before round r, until the last flood's turns no
// longer reach the flooder's provider: none for quiet, within within.
func (e *Env) awaitDrained(r int, quiet, within time.Duration) {
	e.T.Helper()
	fl := stateOf(e, noisyKey).flooder
	began := time.Now()
	last, since := requestCount(fl), began
	w := Wait{What: "the server to be done with the flood of round " + fmt.Sprint(r-1), Within: within, Poll: 25 * time.Millisecond}
	err := Await(e.Ctx, w, func() (bool, string) {
		if n := requestCount(fl); n != last {
			last, since = n, time.Now()
		}
		still := time.Since(since)
		return still >= quiet, fmt.Sprintf("%d request(s) at %s's provider, the last %v ago", last, fl.Name, still.Round(time.Millisecond))
	})
	var we *WaitError
	switch {
	case errors.As(err, &we) && we.Err == nil:
		e.Logf("round %d: the server still ran the last flood's turns after %v (%s): the round goes on", r, within, we.Last)
	case err != nil:
		e.T.Fatalf("round %d: %v", r, err)
	default:
		e.Logf("round %d: the last flood's turns done %v after its stop", r, time.Since(began).Round(time.Millisecond))
	}
}

// noisyDone reports whether the rounds stop after the ran-th: every
// neighbour's verdict is decided (invariants.Latencies.Judge of
// noisyRounds), or, past noisyRounds, no more rounds could decide it.
func (e *Env) noisyDone(ran int) bool {
	var lats []invariants.Latencies
	for _, nb := range stateOf(e, noisyKey).neighbours {
		lats = append(lats, *nb.lat)
	}
	return noisyDone(lats, ran)
}

// noisyDone is Env.noisyDone of the neighbours' latencies. A verdict left
// undecided after noisyRounds (only unjudged rounds leave it so) gets
// another round while one side could still win a majority of
// noisyMaxRounds: the easiest majority to reach, since each round adds
// one to a side and half a vote to the majority.
func noisyDone(lats []invariants.Latencies, ran int) bool {
	for _, l := range lats {
		j := l.Judge(noisyRounds)
		if j.Decided {
			continue
		}
		if ran < noisyRounds {
			return false
		}
		left, need := noisyMaxRounds-ran, noisyMaxRounds/2+1
		within := j.Rounds - j.Overs - j.Unjudged
		if left > 0 && (within+left >= need || j.Overs+left >= need) {
			return false
		}
	}
	return true
}

// logRound logs every neighbour's p99s and the control's times in round r.
func (e *Env) logRound(r int) {
	e.T.Helper()
	for _, nb := range stateOf(e, noisyKey).neighbours {
		ps := nb.lat.P99s()
		if len(ps) <= r {
			continue
		}
		p := ps[r]
		note := ""
		if p.Inconclusive {
			note = " (inconclusive: the machine control slowed too much)"
		}
		e.Logf("round %d: %s: baseline p99 %v, under the flood p99 %v (%.1fx, %d cut); the machine control %v alone, %v under the flood (%.1fx); limit %v%s", r, nb.t.Name,
			p.Baseline.Round(time.Millisecond), p.Loaded.Round(time.Millisecond), p.Ratio(), nb.cut,
			p.ControlBaseline.Round(10*time.Microsecond), p.ControlLoaded.Round(10*time.Microsecond), p.Machine,
			p.Limit.Round(time.Millisecond), note)
	}
}

func noisyNeighbour() Spec {
	return Spec{
		ID:        "noisy-neighbour",
		Purpose:   "one tenant floods the pooled server with connections and requests from a process of its own; every other tenant's turns complete within 3x their baseline p99, beyond what a machine control slowed",
		Backends:  []harness.Backend{harness.BackendServe},
		Focus:     []Invariant{Availability, Requests},
		Snapshots: perTenant(1 + 2*neighbourTurns*noisyMaxRounds),
		Timeout:   MaxTimeout,
		Alone:     true,
		Responder: attack.Responder,
		Phases: []Phase{
			{Name: "setup", Run: func(e *Env) {
				e.holdFlooding()
				e.serveSessions(0)
				e.setupNoisy()
				e.warmUp()
			}},
			{Name: "rounds", Run: func(e *Env) {
				// Rounds interleave a window alone and a window under a
				// fresh flood, so the machine's own load, which varies
				// over a run, weighs on both alike, and the control
				// measures what the flood costs the machine; they stop
				// once every neighbour's verdict is decided, or can be
				// no more (noisyDone). A round after the first waits for
				// the server to be done with the last flood
				// (awaitDrained).
				for r := 0; r < noisyMaxRounds; r++ {
					if r > 0 {
						e.awaitDrained(r, drainQuiet, drainWithin)
					}
					f := e.startFlood(r)
					e.timeNeighbours(false)
					e.floodRound(r, f)
					e.logRound(r)
					if e.noisyDone(r + 1) {
						break
					}
				}
				n := stateOf(e, noisyKey)
				if err := n.control.Close(); err != nil {
					e.T.Fatalf("the machine control: %v", err)
				}
				for _, nb := range n.neighbours {
					e.CheckAvailability(*nb.lat)
				}
			}},
		},
	}
}
