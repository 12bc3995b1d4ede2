package scenarios

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Colliding methods: every tenant sends the same request, byte for byte,
// its JSON-RPC id included, at the same moment, then sends it again with
// the same id (a replay). A cache keyed by the request (an idempotency or
// replay cache keyed by method, id and params, a result cache keyed by
// the params) with no connection or tenant in its key answers one tenant
// with another's reply: another tenant's model, workdir or reply canary
// in its frames (the frame scan), or an identifier handed to two tenants
// (a session id, a job id: an authz finding). Last, every tenant submits
// one prompt on its own session with one request id.

// collideCall is one request every tenant sends byte for byte.
type collideCall struct {
	op     string         // the logical operation (the dialect maps it)
	params map[string]any // the same for every tenant: no profile, no session
	// owned are the identifiers a reply hands its tenant, each of which no
	// other tenant may be given; nil when the frame scan alone judges it.
	owned func(res json.RawMessage) []string
}

// Texts every tenant sends in the colliding methods, byte for byte.
const (
	collideMethodsJob    = "collide-methods-job"
	collideMethodsPrompt = "Colliding method: run the environment probe."
	collideSettingPrompt = "Colliding setting: answer as yourself."
	collideKeySlug       = "collide"
	collideKeyValue      = "collide-same-key-for-every-tenant"
)

// collideFirstID is the request id of collideCalls' first row; row i uses
// collideFirstID+i in both its rounds, and the prompts the id after the
// last row's. Far above the ids a connection numbers its own calls with,
// which skip it while it is in flight anyway.
const collideFirstID = 46_000

// collideCalls are the methods a tenant may call on its own things with
// params that name no tenant: on a connection that holds the tenant's own
// credential, no profile means its own. prompt.submit, session.resume,
// session.close and cron.trigger name a session or job of the tenant's
// own, so their frames cannot be the same (collideSubmits sends a prompt
// from every tenant with one id); profiles.create and profiles.delete are
// the operator's.
func collideCalls() []collideCall {
	return []collideCall{
		{op: "session.create", params: map[string]any{}, owned: sessionIDs},
		{op: "cron.create", params: map[string]any{"name": collideMethodsJob, "prompt": collideMethodsPrompt, "every": "every 1h"}, owned: createdJobID},
		{op: "cron.list", params: map[string]any{}, owned: listedJobIDs},
		{op: "profiles.list", params: map[string]any{}},
		{op: "config.set", params: map[string]any{"key": "prompt", "value": collideSettingPrompt}},
		{op: "model.save_key", params: map[string]any{"slug": collideKeySlug, "api_key": collideKeyValue}},
	}
}

// sessionIDs are a session.create reply's live and stored session ids.
func sessionIDs(res json.RawMessage) []string {
	var s harness.SessionInfo
	_ = json.Unmarshal(res, &s) // a reply of another shape hands out no id
	return nonEmpty(s.SessionID, s.StoredSessionID)
}

// createdJobID is a cron.create reply's job id.
func createdJobID(res json.RawMessage) []string {
	var r struct {
		Job cronJob `json:"job"`
	}
	_ = json.Unmarshal(res, &r)
	return nonEmpty(r.Job.ID)
}

// listedJobIDs are the job ids of a cron.list reply.
func listedJobIDs(res json.RawMessage) []string {
	var r struct {
		Jobs []cronJob `json:"jobs"`
	}
	_ = json.Unmarshal(res, &r)
	var out []string
	for _, j := range r.Jobs {
		out = append(out, nonEmpty(j.ID)...)
	}
	return out
}

func nonEmpty(vs ...string) []string {
	var out []string
	for _, v := range vs {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}

// collideMethodsWhy says why the tenants' requests cannot be the same on
// this target ("" when they can).
func (e *Env) collideMethodsWhy() string {
	if !e.Box.Target.TenantCredentials {
		return "every connection holds the operator's token (the target declares no tenant_credentials): a request that names no profile is the launch profile's for every tenant, so the same request cannot mean each tenant's own things"
	}
	return ""
}

// handed is the request whose reply handed out an identifier.
type handed struct {
	op    string
	id    int64 // the row's request id: rows are sent in its order
	round int
}

// before reports whether h was sent before o.
func (h handed) before(o handed) bool { return h.id < o.id || h.id == o.id && h.round < o.round }

func (h handed) String() string { return fmt.Sprintf("%s id %d, round %d", h.op, h.id, h.round) }

// idHolders are the identifiers replies handed out: to which tenant, by
// which request (its first).
type idHolders map[string]map[string]handed

// add records that by handed ident to tenant.
func (h idHolders) add(ident, tenant string, by handed) {
	if h[ident] == nil {
		h[ident] = map[string]handed{}
	}
	if _, ok := h[ident][tenant]; !ok {
		h[ident][tenant] = by
	}
}

// collideMethods sends every row of collideCalls from every tenant at
// once, twice with the same id, and finds an identifier handed to two
// tenants; then a prompt from every tenant with one id (collideSubmits).
// The replies land in each tenant's main connection's frames, which the
// frame scan reads for another tenant's canaries.
func (e *Env) collideMethods() {
	e.T.Helper()
	rows := collideCalls()
	if why := e.collideMethodsWhy(); why != "" {
		e.skipRow(string(invariants.Authz), "byte-identical requests not tried: "+why)
	} else {
		held := idHolders{}
		for i, row := range rows {
			id := int64(collideFirstID + i)
			for round := 1; round <= 2; round++ {
				if !e.collideRound(row, id, round, held) {
					break
				}
			}
		}
		e.judgeHolders(held)
	}
	e.collideSubmits(int64(collideFirstID + len(rows)))
}

// collideSubmits has every tenant submit collidePrompt on its main
// session at once with request id id: the frames differ only in the
// session id, so a cache keyed by method and id (or by the text) answers
// one tenant with another's turn, whose reply canary is foreign to it.
// Each answer must carry its own. Sent once: the same id again on the
// same session is a retry, which an idempotent server answers without a
// second turn.
func (e *Env) collideSubmits(id int64) {
	e.T.Helper()
	if e.Conns[e.Tenants[0].Name].Transport().Kind == harness.TransportChat {
		e.skipRow(string(invariants.RPC), "prompts with one request id not tried: a chat transport sends no request id")
		return
	}
	sids := map[string]string{}
	for _, t := range e.Tenants {
		sids[t.Name] = e.Sessions[t.Name].SessionID
	}
	e.collideTurnsAs(sids, fmt.Sprintf("colliding prompts with request id %d", id), func(ctx context.Context, c *harness.Conn, sid string) (harness.Event, error) {
		return c.TurnWithID(ctx, id, sid, collidePrompt)
	})
}

// collideRound sends row from every tenant at once with request id id and
// records the identifiers each reply handed out. It returns false when
// the row cannot be tried on this target (skipped with the reason).
func (e *Env) collideRound(row collideCall, id int64, round int, held idHolders) bool {
	e.T.Helper()
	replies, errs := gatherAtOnce(e, time.Minute, func(ctx context.Context, t *tenants.Tenant) (json.RawMessage, error) {
		var res json.RawMessage
		err := e.Conns[t.Name].CallWithID(ctx, id, row.op, row.params, &res)
		return res, err
	})
	refused := 0
	for _, t := range e.Tenants {
		err := errs[t.Name]
		var u *harness.UnsupportedError
		switch {
		case errors.As(err, &u):
			e.skipRow(string(invariants.Authz), fmt.Sprintf("byte-identical %s requests not tried: %v", row.op, u))
			return false
		case isRefusal(err):
			// A refusal is a reply too: its frame is scanned like any.
			refused++
			e.Logf("byte-identical %s (id %d, round %d) of %s refused: %v", row.op, id, round, t.Name, err)
		case err != nil:
			e.T.Fatalf("byte-identical %s (id %d, round %d) of %s: %v", row.op, id, round, t.Name, err)
		}
	}
	if round == 1 && refused == len(e.Tenants) {
		e.skipRow(string(invariants.Authz), fmt.Sprintf("byte-identical %s requests not tried: the target refused every tenant's (see the log)", row.op))
		return false
	}
	if row.owned == nil {
		return true
	}
	by := handed{op: row.op, id: id, round: round}
	for _, t := range e.Tenants {
		if errs[t.Name] == nil {
			for _, v := range row.owned(replies[t.Name]) {
				held.add(v, t.Name, by)
			}
		}
	}
	return true
}

// judgeHolders finds every identifier handed to more than one tenant: a
// reply of one tenant served to another (a tenant may be given its own
// again: a replay of its own request). Its owner is the tenant it was
// handed to first (in tenant order among those of one round).
func (e *Env) judgeHolders(held idHolders) {
	idents := make([]string, 0, len(held))
	for ident := range held {
		idents = append(idents, ident)
	}
	sort.Strings(idents)
	for _, ident := range idents {
		if len(held[ident]) < 2 {
			continue
		}
		owner := ""
		for _, t := range e.Tenants {
			if by, ok := held[ident][t.Name]; ok && (owner == "" || by.before(held[ident][owner])) {
				owner = t.Name
			}
		}
		for _, t := range e.Tenants {
			by, ok := held[ident][t.Name]
			if !ok || t.Name == owner {
				continue
			}
			e.Find(invariants.Finding{Invariant: invariants.Authz, Tenant: t.Name, Owner: owner,
				Where: invariants.Where{Label: "byte-identical requests: " + by.String(), Method: by.op},
				Detail: fmt.Sprintf("the same request, id included, handed %s's identifier %s (by %s) to %s too (by %s): one tenant was answered with another's reply",
					owner, ident, held[ident][owner], t.Name, by)})
		}
	}
}
