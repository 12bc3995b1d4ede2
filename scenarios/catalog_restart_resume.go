package scenarios

import (
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
)

func restartResume() Spec {
	return Spec{
		ID:        "restart-resume",
		Purpose:   "sessions survive a server restart: resume from each profile's own state, turns, a second cron fire",
		Backends:  []harness.Backend{harness.BackendServe},
		Focus:     []Invariant{Files, EnvSnapshots, LaunchBleed},
		Snapshots: perTenant(4),
		Timeout:   4 * time.Minute,
		Needs:     []Need{NeedRestart},
		Phases: []Phase{
			{Name: "before", Run: func(e *Env) {
				e.serveSessions(1)
				e.CronEach()
			}},
			{Name: "restart", Run: func(e *Env) {
				old := e.Server
				stored := map[string]string{}
				for _, t := range e.Tenants {
					stored[t.Name] = e.Sessions[t.Name].StoredSessionID
				}
				e.StopServe(old)
				e.ServePerTenant()
				// A running server's stop is proved by its health URL going
				// quiet (Sandbox.StopRemote); the harness's own by its pid.
				if old.Proc != nil && e.Server.Pid() == old.Pid() {
					e.T.Fatalf("the server did not restart")
				}
				for _, t := range e.Tenants {
					e.Sessions[t.Name] = e.ResumeSession(e.Conns[t.Name], t, stored[t.Name])
				}
				e.InterleavedTurns(1)
			}},
			{Name: "cron-again", Run: func(e *Env) { e.CronEach() }},
		},
	}
}
