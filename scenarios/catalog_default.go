package scenarios

import (
	"fmt"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
)

// Default is the certification catalog.
func Default() *Catalog {
	c, err := NewCatalog(
		stdioSeparate(),
		pooledServe(),
		concurrentTurns(),
		settingsWrites(),
		profileLifecycle(),
		restartResume(),
		gateway(),
		shellReuse(),
		pluginHosts(),
		pluginSurfaces(),
		tenantAuthz(),
		profileRecreate(),
		hostileTools(),
		hostilePlugin(),
		hostileChains(),
		hostileRestarts(),
		collidingInputs(),
		noisyNeighbour(),
		gatewayTenants(),
		gatewayFailover(),
		gatewayRoutes(),
		gatewayOffboarding(),
		gatewayFetch(),
		gatewayCollide(),
	)
	if err != nil {
		// The catalog is data compiled into the binary; TestCatalogIsValid
		// keeps this unreachable.
		panic(err)
	}
	return c
}

func perTenant(n int) func(int) int { return func(int) int { return n } }

func stdioSeparate() Spec {
	return Spec{
		ID:        "stdio-separate",
		Purpose:   "one stdio backend per tenant, sessions of each tenant's own profile, interleaved turns",
		Backends:  []harness.Backend{harness.BackendStdio},
		Focus:     []Invariant{Requests, EnvSnapshots, Files, LaunchBleed},
		Snapshots: perTenant(2),
		Timeout:   3 * time.Minute,
		Phases: []Phase{
			{Name: "start", Run: func(e *Env) {
				e.StdioPerTenant()
				e.OpenSessions()
			}},
			{Name: "interleaved-turns", Run: func(e *Env) { e.InterleavedTurns(2) }},
		},
	}
}

func pooledServe() Spec {
	return Spec{
		ID:        "pooled-serve",
		Purpose:   "every profile on one serve process: a connection and session each, interleaved turns, a cron fire each",
		Backends:  []harness.Backend{harness.BackendServe},
		Focus:     []Invariant{Requests, EnvSnapshots, Text, LaunchBleed},
		Snapshots: perTenant(3),
		Timeout:   3 * time.Minute,
		Phases: []Phase{
			{Name: "connect", Run: func(e *Env) {
				e.ServePerTenant()
				e.OpenSessions()
			}},
			{Name: "interleaved-turns", Run: func(e *Env) { e.InterleavedTurns(2) }},
			{Name: "cron", Run: func(e *Env) { e.CronEach() }},
		},
	}
}

// concurrentTurnsPerTenant is how many turns each tenant runs at once.
const concurrentTurnsPerTenant = 3

func concurrentTurns() Spec {
	return Spec{
		ID:        "concurrent-turns",
		Purpose:   "every tenant runs several turns at the same time on one pooled server",
		Backends:  []harness.Backend{harness.BackendServe},
		Focus:     []Invariant{Requests, EnvSnapshots, Text},
		Snapshots: perTenant(concurrentTurnsPerTenant),
		Timeout:   5 * time.Minute,
		Phases: []Phase{
			{Name: "concurrent-turns", Run: func(e *Env) {
				srv := e.StartServe()
				type job struct {
					conn *harness.Conn
					sid  string
					t    int
				}
				var jobs []job
				for i, t := range e.Tenants {
					c := e.Dial(srv, t)
					for k := 0; k < concurrentTurnsPerTenant; k++ {
						jobs = append(jobs, job{conn: c, sid: e.CreateSession(c, t).SessionID, t: i})
					}
				}
				var wg sync.WaitGroup
				errs := make(chan error, len(jobs))
				for _, j := range jobs {
					t := e.Tenants[j.t]
					e.ExpectSnapshots(t, 1)
					wg.Add(1)
					go func() {
						defer wg.Done()
						ctx, cancel := e.ctx(2 * time.Minute)
						defer cancel()
						if _, err := j.conn.Turn(ctx, j.sid, "Run the environment probe for "+t.Name+"."); err != nil {
							errs <- fmt.Errorf("turn of %s: %w", t.Name, err)
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					e.T.Errorf("%v", err)
				}
			}},
		},
	}
}
