package scenarios

import (
	"context"
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
	// NeighbourTurns is how many turns each other tenant times, alone and
	// under the flood.
	NeighbourTurns = 5
)

// flood is one tenant's flood of a pooled server: every worker opens a
// session and submits a turn on it, again and again, not waiting for the
// turns to end, until the budget is spent or the flood is stopped.
type flood struct {
	sent, refused, ok atomic.Int64
	firstErr          atomic.Value
	stop              context.CancelFunc
	wg                sync.WaitGroup
}

// startFlood starts t's flood on FloodConns new connections.
func (e *Env) startFlood(t *tenants.Tenant) *flood {
	e.T.Helper()
	ctx, cancel := context.WithCancel(e.Ctx)
	f := &flood{stop: cancel}
	var budget atomic.Int64
	budget.Store(FloodRequests)
	// Every connection is open before any worker starts: a server the
	// flood swamps must show it in the neighbours' turns, not in the
	// flooder's own connection set-up.
	conns := make([]*harness.Conn, FloodConns)
	for i := range conns {
		conns[i] = e.Dial(e.Server, t)
	}
	for _, c := range conns {
		for w := 0; w < FloodWorkers; w++ {
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				for n := 0; ctx.Err() == nil && budget.Add(-2) >= 0; n++ {
					var s harness.SessionInfo
					if !f.call(ctx, func(ctx context.Context) error {
						var err error
						s, err = c.CreateSession(ctx, profileParam(t))
						return err
					}) {
						continue
					}
					f.call(ctx, func(ctx context.Context) error {
						return c.Call(ctx, "prompt.submit", map[string]any{"session_id": s.SessionID, "text": fmt.Sprintf("%s %d", attack.FloodPrompt, n)}, nil)
					})
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

// timeTurns runs n probe turns of t on its main session and returns their
// durations and the turns that failed. A baseline turn that fails is an
// error of the scenario (returned: it runs on a goroutine of its own).
func (e *Env) timeTurns(t *tenants.Tenant, n int, l *invariants.Latencies, loaded bool) error {
	e.T.Helper()
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
			l.Loaded = append(l.Loaded, d)
		default:
			l.Baseline = append(l.Baseline, d)
		}
	}
	return nil
}

// timeNeighbours times n turns of every tenant but the flooder, all at
// once, baseline or loaded: both measurements run the neighbours
// concurrently, so that under the flood only the flood is new.
func (e *Env) timeNeighbours(n int, loaded bool) {
	e.T.Helper()
	neighbours := e.Tenants[:len(e.Tenants)-1]
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
	for _, err := range errs {
		if err != nil {
			e.T.Fatalf("%v", err)
		}
	}
}

func noisyNeighbour() Spec {
	return Spec{
		ID:        "noisy-neighbour",
		Purpose:   "one tenant floods the pooled server with connections and requests; every other tenant's turns complete within 3x their baseline p99",
		Backends:  []harness.Backend{harness.BackendServe},
		Focus:     []Invariant{Availability, Requests},
		Snapshots: perTenant(2 * NeighbourTurns),
		Timeout:   6 * time.Minute,
		Responder: attack.Responder,
		Phases: []Phase{
			{Name: "baseline", Run: func(e *Env) {
				e.noisy = map[string]*invariants.Latencies{}
				e.ServePerTenant()
				e.OpenSessions()
				flooder := e.Tenants[len(e.Tenants)-1]
				for _, t := range e.Tenants[:len(e.Tenants)-1] {
					e.noisy[t.Name] = &invariants.Latencies{Tenant: t.Name, Flooder: flooder.Name}
				}
				e.timeNeighbours(NeighbourTurns, false)
			}},
			{Name: "flood", Run: func(e *Env) {
				flooder := e.Tenants[len(e.Tenants)-1]
				before := len(flooder.Requests())
				f := e.startFlood(flooder)
				defer f.end()
				// The flood is on once every worker has a request in flight and
				// the server runs the flood's turns (one reached the flooder's
				// provider). No more than one: a server the flood swamps may
				// take minutes per turn, and that must show as the neighbours'
				// starvation (a finding), not as a wait of the harness.
				e.Eventually("the flood to reach "+flooder.Name+"'s provider", 2*time.Minute, func() (bool, string) {
					n := len(flooder.Requests()) - before
					sent := f.sent.Load()
					return n >= 1 && sent >= FloodConns*FloodWorkers, fmt.Sprintf("%d flood turn(s) at the provider, %d request(s) sent", n, sent)
				})
				e.timeNeighbours(NeighbourTurns, true)
				f.end()
				e.Logf("flood of %s: %d request(s) sent, %d answered, %d refused (first: %v); %d turn(s) at its provider",
					flooder.Name, f.sent.Load(), f.ok.Load(), f.refused.Load(), f.firstErr.Load(), len(flooder.Requests())-before)
				for _, t := range e.Tenants[:len(e.Tenants)-1] {
					e.CheckAvailability(*e.noisy[t.Name])
				}
			}},
		},
	}
}
