package scenarios

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// recreated is what profile-recreate keeps of the profile it deletes.
type recreated struct {
	victim *tenants.Tenant
	stored string // a stored session of the deleted profile
	live   string // its live session on its old connection
	cron   string // a cron job of the deleted profile
}

// recreateState is the profile profile-recreate deletes and makes again.
var recreateState = &stateKey[recreated]{"profile-recreate"}

func profileRecreate() Spec {
	return Spec{
		ID:        "profile-recreate",
		Purpose:   "a profile with sessions, a cron job, a saved key and settings is deleted and made again under the same name mid-run: the new one inherits and resumes nothing",
		Backends:  []harness.Backend{harness.BackendServe},
		Focus:     []Invariant{Files, Authz, WriteScope},
		Snapshots: perTenant(1),
		Timeout:   3 * time.Minute,
		Needs:     []Need{NeedFiles},
		Phases: []Phase{
			{Name: "own-things", Run: func(e *Env) {
				e.serveSessions(1)
				// The victim: a non-launch tenant the seed picks.
				var named []*tenants.Tenant
				for _, t := range e.Tenants {
					if !t.Launch {
						named = append(named, t)
					}
				}
				if len(named) == 0 {
					e.T.Fatalf("profile-recreate needs a named (non-launch) tenant")
				}
				v := named[e.Rand.IntN(len(named))]
				c := e.Conns[v.Name]
				key := e.mint(v, tenants.SavedKey)
				prompt := e.mint(v, "custom_prompt")
				e.Call(c, "model.save_key", map[string]any{"profile": v.Name, "slug": saveKeySlug(v), "api_key": key.Value}, nil)
				e.Call(c, "config.set", map[string]any{"profile": v.Name, "key": "prompt", "value": prompt.Value}, nil)
				*stateOf(e, recreateState) = recreated{victim: v, stored: e.Sessions[v.Name].StoredSessionID, live: e.Sessions[v.Name].SessionID,
					cron: e.CreateCron(c, v)}
				e.Logf("profile-recreate: the victim is %s", v.Name)
			}},
			{Name: "delete-and-recreate", Run: func(e *Env) {
				r := stateOf(e, recreateState)
				v := r.victim
				op := e.DialOperator(e.Server)
				e.Call(op, "profiles.delete", map[string]any{"name": v.Name}, nil)
				e.MarkDeleted(v)
				var res struct {
					Path string `json:"path"`
				}
				e.Call(op, "profiles.create", map[string]any{"name": v.Name}, &res)
				if want := e.Box.RemotePath(v.Home); res.Path != want { // on a running server's host, through remote:
					e.T.Fatalf("profiles.create %s put it at %s, want %s", v.Name, res.Path, want)
				}
				// The home as the server made it: nothing of anyone, the
				// deleted profile of the same name included (a running
				// server's, read through remote: first).
				if fs := e.pullHomes(e.Ctx); fs != nil {
					e.T.Fatalf("%s", fs[0].Detail)
				}
				chk := e.checker(e.Box.Set.Tenants)
				for _, f := range chk.Inherited(e.Ctx, v.Name, v.Home) {
					e.Find(f)
				}
				inherits := func(what string, detail string) {
					e.Find(invariants.Finding{Invariant: invariants.Authz, Tenant: v.Name, Owner: v.Name,
						Where: invariants.Where{Label: "re-created profile " + v.Name}, Detail: what + ": " + detail})
				}
				// No stored session of the deleted profile resumes.
				ctx, cancel := e.ctx(30 * time.Second)
				defer cancel()
				if s, err := op.ResumeSession(ctx, r.stored, v.Name); err == nil {
					inherits("resumes a stored session of the deleted profile", fmt.Sprintf("session.resume %s answered live session %s", r.stored, s.SessionID))
				} else if !isRefusal(err) {
					e.T.Fatalf("session.resume on the re-created %s: %v", v.Name, err)
				}
				// No cron job carries over.
				var jobs struct {
					Jobs []json.RawMessage `json:"jobs"`
				}
				e.Call(op, "cron.list", map[string]any{"profile": v.Name}, &jobs)
				if len(jobs.Jobs) > 0 {
					inherits("inherits cron jobs", fmt.Sprintf("cron.list shows %d job(s): %s", len(jobs.Jobs), excerpt(jobs.Jobs[0])))
				}
				// The deleted profile's live session and connection reach
				// nothing of the new one.
				old := e.Conns[v.Name]
				if err := old.Call(ctx, "prompt.submit", map[string]any{"session_id": r.live, "text": "Run the environment probe."}, nil); err == nil {
					inherits("a live session of the deleted profile still serves", "prompt.submit "+r.live+" was accepted")
				} else if !isRefusal(err) {
					e.T.Fatalf("prompt.submit on a deleted profile's session: %v", err)
				}
				if e.Box.Target.TenantCredentials {
					if s, err := old.CreateSession(ctx, ""); err == nil {
						inherits("the deleted profile's connection reaches the new one", "session.create answered "+s.SessionID)
					} else if !isRefusal(err) {
						e.T.Fatalf("session.create on a deleted profile's connection: %v", err)
					}
				} else {
					e.skip(string(Authz), noCredentials)
				}
			}},
			{Name: "others-serve", Run: func(e *Env) {
				for _, t := range e.Tenants {
					if t != stateOf(e, recreateState).victim {
						e.Turn(e.Conns[t.Name], t, e.Sessions[t.Name].SessionID)
					}
				}
			}},
		},
	}
}

// isRefusal reports whether err is the server's error reply (not a broken
// connection or a timeout).
func isRefusal(err error) bool {
	var rerr *harness.RPCError
	return errors.As(err, &rerr)
}
