package scenarios

import (
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
)

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
