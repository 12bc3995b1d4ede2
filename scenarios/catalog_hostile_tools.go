package scenarios

import (
	"fmt"
	"time"

	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

func hostileTools() Spec {
	rows := attack.Terminal()
	return hostileSpec(Spec{
		ID:        "hostile-tools",
		Purpose:   "every tenant's model attacks the others through its terminal: reads, writes, escaping processes, floods",
		Focus:     []Invariant{Requests, EnvSnapshots, Files, ProcessEscape},
		Snapshots: perTenant(2),
		Timeout:   8 * time.Minute,
		Needs:     []Need{NeedFiles, NeedRestart},
		Phases: []Phase{
			{Name: "connect", Run: func(e *Env) { e.startHostile(nil) }},
			{Name: "reads", Run: func(e *Env) { e.attackAll(rows, attack.Read, attack.Flood) }},
			{Name: "writes", Run: func(e *Env) {
				e.attackAll(rows, attack.Write)
				e.nextTurns()
			}},
			{Name: "session-close", Run: func(e *Env) {
				// Each attacker's session, processes and mark are its own:
				// they close (and are waited for) at once.
				e.atOnce(e.attackers(), func(t *tenants.Tenant) {
					c := e.Conns[t.Name]
					s := e.CreateSession(c, t)
					mark := e.spawnIn(c, t, s.SessionID, rows, "processes of session "+s.SessionID+" of "+t.Name)
					e.CloseSession(c, s.SessionID)
					e.CheckEscapes(invariants.Ended{Event: fmt.Sprintf("the close of session %s of %s", s.SessionID, t.Name),
						Canaries: []tenants.Canary{mark}})
				})
			}},
			{Name: "profile-delete", Run: func(e *Env) {
				name := "hostile-" + lifecycleName(e)
				g := e.addTenant(name)
				e.Tenants = e.Box.Set.Tenants
				admin := e.DialOperator(e.Server)
				e.Call(admin, "profiles.create", map[string]any{"name": name}, nil)
				// Through the sandbox, so the new home gets the dialect's config
				// as every other home did.
				if err := e.Box.WriteHome(g, tenants.HomeExtras{}); err != nil {
					e.T.Fatalf("write home of %s: %v", name, err)
				}
				c := e.Dial(e.Server, g)
				s := e.CreateSession(c, g)
				e.Turn(c, g, s.SessionID)
				e.spawnIn(c, g, s.SessionID, rows, "processes of profile "+name)
				e.Call(admin, "profiles.delete", map[string]any{"name": name}, nil)
				e.MarkDeleted(g)
				e.CheckEscapes(invariants.Ended{Event: "the deletion of profile " + name, Canaries: g.Canaries()})
			}},
			{Name: "server-stop", Run: func(e *Env) { e.stopAndCheck(rows) }},
		},
	})
}
