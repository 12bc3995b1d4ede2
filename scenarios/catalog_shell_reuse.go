package scenarios

import (
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
)

func shellReuse() Spec {
	return Spec{
		ID:        "shell-reuse",
		Purpose:   "interleaved sessions of different tenants on one server: no shell state crosses sessions",
		Backends:  []harness.Backend{harness.BackendServe},
		Focus:     []Invariant{EnvSnapshots},
		Snapshots: perTenant(4),
		Timeout:   3 * time.Minute,
		Phases: []Phase{
			{Name: "interleave", Run: func(e *Env) {
				e.ServePerTenant()
				second := map[string]harness.SessionInfo{}
				e.OpenSessions()
				for _, t := range e.Tenants {
					second[t.Name] = e.CreateSession(e.Conns[t.Name], t)
				}
				// Each session's probe exports its tenant's shell-state canary
				// after the dump: a shell another session reuses shows it.
				for round := 0; round < 2; round++ {
					for _, t := range e.Tenants {
						e.Turn(e.Conns[t.Name], t, e.Sessions[t.Name].SessionID)
					}
					for i := len(e.Tenants) - 1; i >= 0; i-- {
						t := e.Tenants[i]
						e.Turn(e.Conns[t.Name], t, second[t.Name].SessionID)
					}
				}
			}},
		},
	}
}
