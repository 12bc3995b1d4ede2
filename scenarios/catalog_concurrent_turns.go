package scenarios

import (
	"fmt"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
)

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
