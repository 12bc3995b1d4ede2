package scenarios

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// owned is what one tenant holds that another may try to name.
type owned struct {
	tenant *tenants.Tenant
	live   string // a live session of its main connection
	stored string // that session's stored id
	cron   string // a cron job of its profile
}

// probe is one row of the authorization matrix: a method an attacker's
// connection calls naming the owner's session, stored session, profile or
// cron job. Every row must be refused, with no data and no effect.
type probe struct {
	name   string
	method string
	// profile rows address the owner's profile by name: they need tenant
	// credentials (with the operator's token every connection may
	// address every profile, by design).
	profile bool
	params  func(attacker *tenants.Tenant, o owned) map[string]any
}

// authzProbes is the matrix. session.close comes last: accepted, it ends
// the owner's session.
var authzProbes = []probe{
	{name: "prompt on the owner's live session", method: "prompt.submit", params: func(_ *tenants.Tenant, o owned) map[string]any {
		return map[string]any{"session_id": o.live, "text": "authz probe: run the environment probe"}
	}},
	{name: "config.set by the owner's live session", method: "config.set", params: func(_ *tenants.Tenant, o owned) map[string]any {
		return map[string]any{"session_id": o.live, "key": "prompt", "value": "authz probe"}
	}},
	{name: "model.save_key by the owner's live session", method: "model.save_key", params: func(_ *tenants.Tenant, o owned) map[string]any {
		return map[string]any{"session_id": o.live, "slug": "authz_probe", "api_key": "authz-probe-key"}
	}},
	{name: "resume the owner's stored session in the caller's own profile", method: "session.resume", profile: true, params: func(_ *tenants.Tenant, o owned) map[string]any {
		return map[string]any{"session_id": o.stored}
	}},
	{name: "resume the owner's stored session in the owner's profile", method: "session.resume", profile: true, params: func(_ *tenants.Tenant, o owned) map[string]any {
		return map[string]any{"session_id": o.stored, "profile": o.tenant.Name}
	}},
	{name: "session in the owner's profile", method: "session.create", profile: true, params: func(_ *tenants.Tenant, o owned) map[string]any {
		return map[string]any{"profile": o.tenant.Name}
	}},
	{name: "config.set of the owner's profile", method: "config.set", profile: true, params: func(_ *tenants.Tenant, o owned) map[string]any {
		return map[string]any{"profile": o.tenant.Name, "key": "prompt", "value": "authz probe"}
	}},
	{name: "model.save_key in the owner's profile", method: "model.save_key", profile: true, params: func(_ *tenants.Tenant, o owned) map[string]any {
		return map[string]any{"profile": o.tenant.Name, "slug": "authz_probe", "api_key": "authz-probe-key"}
	}},
	{name: "cron.create in the owner's profile", method: "cron.create", profile: true, params: func(_ *tenants.Tenant, o owned) map[string]any {
		return map[string]any{"profile": o.tenant.Name, "name": "authz-probe", "prompt": "authz probe", "every": "every 1h"}
	}},
	{name: "cron.list of the owner's profile", method: "cron.list", profile: true, params: func(_ *tenants.Tenant, o owned) map[string]any {
		return map[string]any{"profile": o.tenant.Name}
	}},
	{name: "cron.trigger of the owner's job in its profile", method: "cron.trigger", profile: true, params: func(_ *tenants.Tenant, o owned) map[string]any {
		return map[string]any{"profile": o.tenant.Name, "id": o.cron}
	}},
	{name: "cron.trigger of the owner's job id in the caller's profile", method: "cron.trigger", profile: true, params: func(_ *tenants.Tenant, o owned) map[string]any {
		return map[string]any{"id": o.cron}
	}},
	{name: "delete the owner's profile", method: "profiles.delete", profile: true, params: func(_ *tenants.Tenant, o owned) map[string]any {
		return map[string]any{"name": o.tenant.Name}
	}},
	{name: "close the owner's live session", method: "session.close", params: func(_ *tenants.Tenant, o owned) map[string]any {
		return map[string]any{"session_id": o.live}
	}},
}

// noCredentials is why the profile rows are skipped on a target whose
// connections all hold the operator's token.
const noCredentials = "every connection holds the operator's token (the target declares no tenant_credentials): the probes that address another tenant's profile are not made"

// authzOwned is what each tenant owns, by name, for the authorization
// probes.
var authzOwned = &stateKey[map[string]owned]{"tenant-authz"}

func tenantAuthz() Spec {
	return Spec{
		ID:        "tenant-authz",
		Purpose:   "every tenant's connection names every other tenant's sessions, stored sessions, profile and cron jobs (and guessed neighbours): each call is refused with no data and no effect",
		Backends:  []harness.Backend{harness.BackendServe},
		Focus:     []Invariant{Authz, WriteScope, Text},
		Snapshots: perTenant(2),
		Timeout:   4 * time.Minute,
		Phases: []Phase{
			{Name: "own-things", Run: func(e *Env) {
				e.serveSessions(1)
				owns := map[string]owned{}
				*stateOf(e, authzOwned) = owns
				var live, stored, crons []string
				for _, t := range e.Tenants {
					s := e.Sessions[t.Name]
					owns[t.Name] = owned{tenant: t, live: s.SessionID, stored: s.StoredSessionID, cron: e.cronIfSupported(e.Conns[t.Name], t)}
					crons = append(crons, owns[t.Name].cron)
					// A second session each, so a counter shows between
					// neighbours.
					s2 := e.CreateSession(e.Conns[t.Name], t)
					live = append(live, s.SessionID, s2.SessionID)
					stored = append(stored, s.StoredSessionID, s2.StoredSessionID)
				}
				// A target that keeps no stored sessions (or no jobs) gives no
				// ids to judge.
				empty := func(id string) bool { return id == "" }
				crons = slices.DeleteFunc(crons, empty)
				stored = slices.DeleteFunc(stored, empty)
				for _, f := range invariants.PredictableIDs("live session", live) {
					e.Find(f)
				}
				for _, f := range invariants.PredictableIDs("stored session", stored) {
					e.Find(f)
				}
				for _, f := range invariants.PredictableIDs("cron job", crons) {
					e.Find(f)
				}
			}},
			{Name: "cross-tenant-calls", Run: func(e *Env) {
				if !e.Box.Target.TenantCredentials {
					e.skip(string(Authz), noCredentials)
				}
				owns := *stateOf(e, authzOwned)
				mine := map[string]map[string]bool{} // attacker -> its own live and stored ids
				e.mu.Lock()
				for _, s := range e.sessions {
					if mine[s.tenant.Name] == nil {
						mine[s.tenant.Name] = map[string]bool{}
					}
					mine[s.tenant.Name][s.info.SessionID] = true
					mine[s.tenant.Name][s.info.StoredSessionID] = true
				}
				e.mu.Unlock()
				for _, a := range e.Tenants {
					for _, o := range e.Shuffled(e.Tenants) {
						if o == a {
							continue
						}
						// Reads of its own state database (a resume refused as unknown)
						// touch its shared-memory index; nothing else of anyone may change.
						e.ScopedWrite(fmt.Sprintf("%s's probes of %s", a.Name, o.Name), a, []string{"logs/", "state.db-shm"}, func() {
							e.probeOwner(a, owns[o.Name], mine[a.Name])
						})
					}
				}
			}},
			{Name: "owners-unharmed", Run: func(e *Env) {
				// Every owner's session still serves its turn.
				for _, t := range e.Tenants {
					e.ExpectSnapshots(t, 1)
					ctx, cancel := e.ctx(e.Times.Turn)
					_, err := e.Conns[t.Name].Turn(ctx, e.Sessions[t.Name].SessionID, "Run the environment probe for "+t.Name+".")
					cancel()
					if err != nil {
						e.Find(invariants.Finding{Invariant: invariants.Authz, Tenant: t.Name, Where: invariants.Where{Label: "session " + e.Sessions[t.Name].SessionID},
							Detail: fmt.Sprintf("its own session no longer serves a turn after the other tenants' probes: %v", err)})
					}
				}
			}},
		},
	}
}

// probeOwner makes every row of the matrix from a's main connection against
// o's things, and the guessed neighbours of o's live and stored ids that a
// does not own; each accepted call is an Authz finding with its evidence.
func (e *Env) probeOwner(a *tenants.Tenant, o owned, own map[string]bool) {
	e.T.Helper()
	c := e.Conns[a.Name]
	for _, p := range authzProbes {
		if p.profile && !e.Box.Target.TenantCredentials {
			continue
		}
		if p.method == "cron.trigger" && o.cron == "" {
			e.skipRow(string(Authz), fmt.Sprintf("probe %q not made: %s made no cron job (cron.create unsupported)", p.name, o.tenant.Name))
			continue
		}
		e.expectRefused(c, a, o.tenant, p.name, p.method, p.params(a, o))
	}
	for _, id := range invariants.Neighbours(o.live) {
		if own[id] {
			continue
		}
		e.expectRefused(c, a, o.tenant, "prompt on a guessed neighbour of the owner's live id", "prompt.submit",
			map[string]any{"session_id": id, "text": "authz probe: run the environment probe"})
	}
	if e.Box.Target.TenantCredentials {
		for _, id := range invariants.Neighbours(o.stored) {
			if own[id] {
				continue
			}
			e.expectRefused(c, a, o.tenant, "resume a guessed neighbour of the owner's stored id", "session.resume", map[string]any{"session_id": id})
		}
	}
}

// expectRefused calls method on a's connection and records an Authz
// finding when the server did not refuse it.
func (e *Env) expectRefused(c *harness.Conn, a, owner *tenants.Tenant, what, method string, params map[string]any) {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(e.Ctx, 30*time.Second)
	defer cancel()
	var res json.RawMessage
	err := c.Call(ctx, method, params, &res)
	var rerr *harness.RPCError
	var uerr *harness.UnsupportedError
	switch {
	case errors.As(err, &rerr):
		return // refused; the refusal frame is scanned with a's other frames
	case errors.As(err, &uerr):
		// The target declares the operation unsupported: this row is not
		// made, and says why; the other rows still are.
		e.skipRow(string(Authz), fmt.Sprintf("probe %q (%s) not made: %s", what, method, uerr.Reason))
		return
	case err != nil:
		e.T.Fatalf("%s's %s (%s): %v", a.Name, method, what, err)
	}
	e.Find(invariants.Finding{
		Invariant: invariants.Authz, Tenant: a.Name, Owner: owner.Name,
		Where:   invariants.Where{Label: "websocket " + a.Name, Method: method},
		Detail:  fmt.Sprintf("%s was not refused: %s(%s) answered", what, method, paramString(params)),
		Excerpt: excerpt(res),
	})
}

// paramString renders params in a stable order for evidence.
func paramString(params map[string]any) string {
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%v", k, params[k])
	}
	return strings.Join(parts, ", ")
}

// cronIfSupported creates t's cron job, or returns "" when the target
// declares cron.create unsupported (the cron rows are then skipped with
// the reason, and the rest of the matrix still runs).
func (e *Env) cronIfSupported(c *harness.Conn, t *tenants.Tenant) string {
	e.T.Helper()
	if why := e.Box.Target.Dialect.Unsupported("cron.create"); why != "" {
		e.skipRow(string(Authz), "the cron rows: cron.create is unsupported by the target: "+why)
		return ""
	}
	return e.CreateCron(c, t)
}

// skipRow records a check not made, with its reason (one entry per
// reason: unlike skip, one invariant may have many).
func (e *Env) skipRow(inv, reason string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.Report.Skipped {
		if s.Invariant == inv && s.Reason == reason {
			return
		}
	}
	e.Report.Skipped = append(e.Report.Skipped, SkippedCheck{Invariant: inv, Reason: reason})
}
