package scenarios

import (
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// lifecycleName is the profile the lifecycle scenario creates: gamma, unless
// the run already has a gamma tenant.
func lifecycleName(e *Env) string {
	if e.Box.Set.Get("gamma") == nil {
		return "gamma"
	}
	return "gamma-live"
}

// lifecycleCreated is the profile the lifecycle scenario made.
var lifecycleCreated = &stateKey[*tenants.Tenant]{"profile-lifecycle"}

func profileLifecycle() Spec {
	return Spec{
		ID:        "profile-lifecycle",
		Purpose:   "a profile created on the live server gets no secret, serves its own turn, and is deleted; the server never restarts",
		Backends:  []harness.Backend{harness.BackendServe},
		Focus:     []Invariant{Files, WriteScope, EnvSnapshots},
		Snapshots: perTenant(1),
		Timeout:   3 * time.Minute,
		Needs:     []Need{NeedFiles},
		Phases: []Phase{
			{Name: "connect", Run: func(e *Env) { e.serveSessions(1) }},
			{Name: "create", Run: func(e *Env) {
				pid := e.Server.Pid()
				name := lifecycleName(e)
				var res struct {
					OK   bool   `json:"ok"`
					Name string `json:"name"`
					Path string `json:"path"`
				}
				// The new profile is a tenant from the start: the write is
				// addressed to it, and its home as the server makes it may hold no
				// other tenant's canary.
				g := e.addTenant(name)
				e.Tenants = append(e.Tenants, g)
				*stateOf(e, lifecycleCreated) = g
				op := e.DialOperator(e.Server)
				e.ScopedWrite("profiles.create "+name, g, []string{g.Home + "/"}, func() {
					e.Call(op, "profiles.create", map[string]any{"name": name}, &res)
				})
				if !res.OK || res.Name != name {
					e.T.Fatalf("profiles.create %s answered %+v", name, res)
				}
				if want := e.Box.RemotePath(g.Home); res.Path != want { // on a running server's host, through remote:
					e.T.Errorf("profiles.create put %s at %s, want %s", name, res.Path, want)
				}
				// The home as the server made it, before the harness writes
				// anything: another tenant's canary there is a leak finding.
				for _, f := range invariants.FileLeaks(e.Ctx, e.Box.Set) {
					e.Find(f)
				}
				if err := e.Box.WriteHome(g, tenants.HomeExtras{}); err != nil {
					e.T.Fatalf("write home of %s: %v", name, err)
				}
				c := e.Dial(e.Server, g)
				s := e.CreateSession(c, g)
				e.Turn(c, g, s.SessionID)
				if e.Server.Pid() != pid {
					e.T.Errorf("the server pid changed from %d to %d", pid, e.Server.Pid())
				}
			}},
			{Name: "delete", Run: func(e *Env) {
				g := *stateOf(e, lifecycleCreated)
				name := g.Name
				op := e.DialOperator(e.Server)
				e.Call(op, "profiles.delete", map[string]any{"name": name}, nil)
				e.MarkDeleted(g)
				// The deleted name is asked for by the operator, except on a
				// server declaring that an unknown profile falls back to the
				// launch profile: that session is the launch tenant's, so
				// it is asked on the launch tenant's own connection (the
				// operator's is nobody's: the launch tenant's canaries
				// would be findings there).
				ask := op
				if e.Box.Target.Dialect.WithDefaults().Behaviours.UnknownProfile == harness.UnknownProfileFallback {
					ask = e.Conns[e.Launch().Name]
				}
				e.UnknownProfile(ask, name)
				// Every other profile still serves, on the same process.
				for _, t := range e.Tenants {
					if t.Name != name {
						e.Turn(e.Conns[t.Name], t, e.Sessions[t.Name].SessionID)
					}
				}
				if !procAlive(e.Server) {
					e.T.Errorf("the server died")
				}
			}},
		},
	}
}

func procAlive(s *Serve) bool {
	if s.Proc == nil {
		return true
	}
	select {
	case <-s.Proc.Done():
		return false
	default:
		return true
	}
}
