package scenarios

import (
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
)

func pooledServe() Spec {
	return Spec{
		ID:        "pooled-serve",
		Purpose:   "every profile on one serve process: a connection and session each, interleaved turns, a cron fire each",
		Backends:  []harness.Backend{harness.BackendServe},
		Focus:     []Invariant{Requests, EnvSnapshots, Text, LaunchBleed},
		Snapshots: perTenant(3),
		Timeout:   3 * time.Minute,
		Phases: []Phase{
			{Name: "connect", Run: func(e *Env) { e.serveSessions(0) }},
			{Name: "interleaved-turns", Run: func(e *Env) { e.InterleavedTurns(2) }},
			{Name: "cron", Run: func(e *Env) { e.CronEach() }},
		},
	}
}
