package scenarios

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Replicas: the target runs as several serve processes on one set of
// homes and stores (Target.Replicas), the way pooled servers run behind a
// load balancer, and every tenant's connections are spread over them in
// an order the seed gives. Whatever one replica did for a tenant, another
// must honour for that tenant alone: a session created on one is resumed
// on another (by its owner only), a setting written on one is read on
// another (by its owner's turns only), a credential revoked through one is
// refused by another at once, and the same request sent by every tenant
// through different replicas gets each its own answer. The leaks are
// findings of the invariants that exist (rpc, request, authz,
// revoked_credential); each phase's control proves the cluster did the
// cross-replica work it tests.

// replicasKey is the replicas scenario's state in a run.
var replicasKey = &stateKey[replicaState]{"replicas"}

// replicaState is where each tenant's connections went.
type replicaState struct {
	// order is, by tenant, the replicas in the order the seed gave it:
	// its replica A (order[0]) and B (order[1]).
	order map[string][]*Serve
	// conns and sessions are each tenant's connection and session on each
	// replica, by replica number.
	conns    map[string]map[int]*harness.Conn
	sessions map[string]map[int]harness.SessionInfo
	operator map[int]*harness.Conn // the operator's connection to a replica
}

// eventWait is how long a tenant's session on another replica has to get
// the event of a setting it wrote (the events-across control).
const eventWait = 10 * time.Second

// identicalPrompt, identicalSystem: what every tenant sends and has as
// its system prompt in the identical-requests phase, byte for byte.
const (
	identicalPrompt = "Identical request over replicas: run the environment probe."
	identicalSystem = "You are the same assistant for everyone."
)

func replicasScenario() Spec {
	return Spec{
		ID:        "replicas",
		Purpose:   "the target's serve replicas on one set of homes and stores, each tenant spread over them: a session created on one and resumed on another, settings written on one and read on another, a credential revoked through one and used on another at once, events between them, the same request through every replica at once",
		Backends:  []harness.Backend{harness.BackendServe},
		Focus:     []Invariant{invariants.RPC, Requests, invariants.Authz, invariants.RevokedCredential, PositiveControl},
		Snapshots: perTenant(4),
		Timeout:   5 * time.Minute,
		Needs:     []Need{NeedReplicas},
		Phases: []Phase{
			{Name: "connect", Run: func(e *Env) { e.replicasConnect() }},
			{Name: "resume-across", Run: func(e *Env) { e.resumeAcross() }},
			{Name: "settings-across", Run: func(e *Env) { e.settingsAcross() }},
			{Name: "events-across", Run: func(e *Env) { e.eventsAcross() }},
			// Revoking ends each tenant's sessions: the phases after it
			// dial again.
			{Name: "revoke-across", Run: func(e *Env) { e.revokeAcross() }},
			// Last: it gives every tenant one model, soul, memory and
			// custom prompt.
			{Name: "identical-requests", Run: func(e *Env) { e.identicalRequests() }},
		},
	}
}

// replicas is the run's replica state.
func (e *Env) replicas() *replicaState { return stateOf(e, replicasKey) }

// dialReplica opens a connection of owner to replica s (its credential,
// or the operator's token on a target without tenant credentials),
// labelled with the replica, and registers it for the scans.
func (e *Env) dialReplica(s *Serve, owner *tenants.Tenant) *harness.Conn {
	e.T.Helper()
	return e.dialAs(s, owner, fmt.Sprintf("websocket %s on %s", owner.Name, s.Name()))
}

// replicasConnect starts every replica, draws each tenant's order of
// them, and opens a connection and a session of each tenant on each.
func (e *Env) replicasConnect() {
	e.T.Helper()
	rs := e.StartReplicas()
	if len(rs) < 2 {
		e.T.Fatalf("the target started %d serve replica(s), want 2 or more", len(rs))
	}
	st := e.replicas()
	st.order = map[string][]*Serve{}
	st.conns = map[string]map[int]*harness.Conn{}
	st.sessions = map[string]map[int]harness.SessionInfo{}
	st.operator = map[int]*harness.Conn{}
	for _, t := range e.Tenants {
		for _, i := range e.Rand.Perm(len(rs)) {
			st.order[t.Name] = append(st.order[t.Name], rs[i])
		}
		st.conns[t.Name] = map[int]*harness.Conn{}
		st.sessions[t.Name] = map[int]harness.SessionInfo{}
		for _, r := range st.order[t.Name] {
			c := e.dialReplica(r, t)
			st.conns[t.Name][r.Replica] = c
			st.sessions[t.Name][r.Replica] = e.CreateSession(c, t)
		}
		e.Logf("%s: replica A is %s, B is %s", t.Name, st.order[t.Name][0].Name(), st.order[t.Name][1].Name())
	}
}

// ab are t's replicas A and B, its connections and its sessions there.
func (st *replicaState) ab(t *tenants.Tenant) (a, b *Serve, ca, cb *harness.Conn, sa, sb harness.SessionInfo) {
	a, b = st.order[t.Name][0], st.order[t.Name][1]
	return a, b, st.conns[t.Name][a.Replica], st.conns[t.Name][b.Replica], st.sessions[t.Name][a.Replica], st.sessions[t.Name][b.Replica]
}

// requestsCarry reports whether a main request of t's provider from
// index from on carries every one of texts in its body.
func requestsCarry(t *tenants.Tenant, from int, texts ...string) bool {
	reqs := t.Requests()
	for _, r := range reqs[min(from, len(reqs)):] {
		if r.Kind != fakellm.KindMain {
			continue
		}
		all := true
		for _, s := range texts {
			all = all && bytes.Contains(r.RawBody, []byte(s))
		}
		if all {
			return true
		}
	}
	return false
}

// replicaControl records a failed control of the replicas scenario: the
// cluster did not do the cross-replica work a phase tests.
func (e *Env) replicaControl(t *tenants.Tenant, label, detail string) {
	e.Find(invariants.Finding{Invariant: invariants.Control, Tenant: t.Name, Where: invariants.Where{Label: label}, Detail: detail})
}

// resumeAcross: each tenant plays a turn of its session on replica A,
// resumes the stored session on replica B and plays on (its history
// must come along: the control), and the next tenant in the seed's order
// asks replica B for the same stored session, which it must refuse.
func (e *Env) resumeAcross() {
	e.T.Helper()
	st := e.replicas()
	for i, t := range e.Tenants {
		a, b, ca, cb, sa, _ := st.ab(t)
		first := e.turnPrompt(ca, t, sa.SessionID)
		stored := sa.StoredSessionID
		if stored == "" {
			e.T.Fatalf("session.create of %s on %s gave no stored session id", t.Name, a.Name())
		}
		resumed := e.ResumeSession(cb, t, stored)
		mark := len(t.Requests())
		next := e.turnPrompt(cb, t, resumed.SessionID)
		if t.HasProvider() && !requestsCarry(t, mark, first, next) {
			e.replicaControl(t, "session.resume on "+b.Name(), fmt.Sprintf(
				"%s's session created and played on %s and resumed on %s lost its history: no request of the turn there carries the earlier prompt %q", t.Name, a.Name(), b.Name(), first))
		}
		u := e.Tenants[(i+1)%len(e.Tenants)]
		params := map[string]any{"session_id": stored}
		if p := profileParam(u); p != "" {
			params["profile"] = p
		}
		e.expectRefused(st.conns[u.Name][b.Replica], u, t,
			fmt.Sprintf("resume %s's stored session (made on %s) on %s", t.Name, a.Name(), b.Name()), "session.resume", params)
		if e.Box.Target.TenantCredentials && !t.Launch {
			e.expectRefused(st.conns[u.Name][b.Replica], u, t,
				fmt.Sprintf("resume %s's stored session (made on %s) on %s in %s's profile", t.Name, a.Name(), b.Name(), t.Name),
				"session.resume", map[string]any{"session_id": stored, "profile": t.Name})
		}
	}
}

// configSet writes t's setting key through c, addressed by t's session
// sid; false (the row skipped, with the reason) when the target's dialect
// does not do it.
func (e *Env) configSet(c *harness.Conn, t *tenants.Tenant, sid, key, value string) bool {
	e.T.Helper()
	for _, op := range []string{"config.set", "config.set." + key} {
		if why := e.Box.Target.Dialect.Unsupported(op); why != "" {
			e.skipRow(string(PositiveControl), fmt.Sprintf("a setting written on one replica and read on another not tried: %s is unsupported by the target: %s", op, why))
			return false
		}
	}
	e.Call(c, "config.set", map[string]any{"key": key, "value": value, "session_id": sid}, nil)
	return true
}

// settingsAcross: each tenant writes a custom prompt of its own (a
// minted canary) on replica A, then plays a turn on replica B: that
// turn's request must carry it (the control); no other tenant's request
// may (the request invariant).
func (e *Env) settingsAcross() {
	e.T.Helper()
	st := e.replicas()
	for _, t := range e.Tenants {
		a, b, ca, cb, sa, sb := st.ab(t)
		v := e.mint(t, "replica_prompt").Value
		if !e.configSet(ca, t, sa.SessionID, "prompt", "Keep the note "+v+" in mind.") {
			return
		}
		mark := len(t.Requests())
		e.turnPrompt(cb, t, sb.SessionID)
		if t.HasProvider() && !requestsCarry(t, mark, v) {
			e.replicaControl(t, "config.set prompt on "+a.Name(), fmt.Sprintf(
				"the custom prompt %s wrote on %s (%s) is not in the request of its next turn on %s", t.Name, a.Name(), v, b.Name()))
		}
	}
}

// eventsAcross: each tenant writes a setting on replica A while every
// tenant holds a session on every replica; no frame on another tenant's
// connection may carry it (the rpc invariant), and the writer's own
// sessions on the other replicas get its event, where the target
// announces settings between replicas (the control; skipped, saying so,
// when no event of it comes at all).
func (e *Env) eventsAcross() {
	e.T.Helper()
	st := e.replicas()
	type miss struct {
		t     *tenants.Tenant
		where string
	}
	announced := 0
	var missed []miss
	for _, t := range e.Tenants {
		a, _, ca, _, sa, _ := st.ab(t)
		v := e.mint(t, "replica_setting").Value
		marks := map[int]int{}
		for _, r := range st.order[t.Name][1:] {
			marks[r.Replica] = st.conns[t.Name][r.Replica].EventCount()
		}
		if !e.configSet(ca, t, sa.SessionID, "prompt", "Keep the setting "+v+" in mind.") {
			return
		}
		for _, r := range st.order[t.Name][1:] {
			ctx, cancel := e.ctx(eventWait)
			_, err := st.conns[t.Name][r.Replica].WaitEvent(ctx, marks[r.Replica], "the event of "+t.Name+"'s setting", func(ev harness.Event) bool {
				return bytes.Contains(ev.Raw, []byte(v))
			})
			cancel()
			if err != nil {
				missed = append(missed, miss{t, fmt.Sprintf("%s's session on %s (the setting written on %s)", t.Name, r.Name(), a.Name())})
				continue
			}
			announced++
		}
	}
	if announced == 0 {
		e.skipRow(string(PositiveControl), fmt.Sprintf("a tenant's own sessions on the other replicas get the event of its setting: the target announced none within %v (it emits no settings event between replicas)", eventWait))
		return
	}
	for _, m := range missed {
		e.replicaControl(m.t, "events across replicas", fmt.Sprintf(
			"%s got no event of its own setting within %v, where %d other session(s) of the run got theirs", m.where, eventWait, announced))
	}
}

// rotateKey sets t's tenant credential to key through replica s: the
// operator's profiles.rotate_key, where the target has it; else an edit of
// t's .env, as the credential-revocation scenario makes. It returns how
// it did so, or "" when it could not (the row skipped, saying why).
func (e *Env) rotateKey(s *Serve, t *tenants.Tenant, key string) string {
	e.T.Helper()
	st := e.replicas()
	op := st.operator[s.Replica]
	if op == nil {
		op = e.DialOperator(s)
		st.operator[s.Replica] = op
	}
	ctx, cancel := e.ctx(e.Times.Call)
	err := op.Call(ctx, "profiles.rotate_key", map[string]any{"name": profileParam(t), "key": key}, nil)
	cancel()
	var rerr *harness.RPCError
	var uerr *harness.UnsupportedError
	switch {
	case err == nil:
		return "rotated through " + s.Name() + " (profiles.rotate_key)"
	case errors.As(err, &rerr) || errors.As(err, &uerr):
		// No such method here: the credential is edited where the
		// target reads it.
	default:
		e.T.Fatalf("profiles.rotate_key of %s through %s: %v", t.Name, s.Name(), err)
	}
	if !e.Box.Target.Files || e.Box.Target.Remote() || e.Box.Target.Layout.Files.Env == "" || e.Box.Target.Layout.APIServerKeyEnv == "" {
		e.skipRow(string(invariants.RevokedCredential), "a credential revoked on one replica, used on another: the target has no profiles.rotate_key and the harness cannot edit its .env")
		return ""
	}
	path := filepath.Join(t.Home, e.Box.Target.Layout.Files.Env)
	old, err := os.ReadFile(path)
	if err != nil {
		e.T.Fatalf("read %s's credential: %v", t.Name, err)
	}
	if err := os.WriteFile(path, []byte(withVar(string(old), e.Box.Target.Layout.APIServerKeyEnv, key)), 0o600); err != nil {
		e.T.Fatalf("rotate %s's credential: %v", t.Name, err)
	}
	return "rotated in its .env"
}

// revokeAcross: for each tenant, a connection and a session on replica
// B with its credential (the control: the credential works there just
// before), the credential rotated through replica A, and at once a turn
// on that session, a new session and a new connection on replica B with
// the old credential: each must be refused; one served is a
// revoked_credential finding. The old credential is put back after.
func (e *Env) revokeAcross() {
	e.T.Helper()
	if !e.Box.Target.TenantCredentials {
		e.skipRow(string(invariants.RevokedCredential), "a credential revoked on one replica, used on another: every connection holds the operator's token (the target declares no tenant_credentials), which no tenant can lose")
		return
	}
	st := e.replicas()
	for _, t := range e.Tenants {
		a, b, _, _, _, _ := st.ab(t)
		old := t.APIServerKey()
		cb := e.dialReplica(b, t)
		ctl := e.CreateSession(cb, t) // the control: the credential works on B just before
		next := e.mint(t, tenants.APIServerKey).Value
		how := e.rotateKey(a, t, next)
		if how == "" {
			return
		}
		before := len(t.Requests())
		calls := []struct {
			what, method string
			params       map[string]any
		}{
			{"a turn on " + b.Name(), "prompt.submit", map[string]any{"session_id": ctl.SessionID, "text": "Run the environment probe for " + t.Name + "."}},
			{"a new session on " + b.Name(), "session.create", map[string]any{}},
		}
		for _, call := range calls {
			ctx, cancel := e.ctx(e.Times.Call)
			var res any
			err := cb.Call(ctx, call.method, call.params, &res)
			cancel()
			if err != nil {
				continue // refused, or the connection closed
			}
			detail := fmt.Sprintf("%s was answered right after the credential was %s", call.what, how)
			if call.method == "prompt.submit" {
				wctx, wcancel := e.ctx(30 * time.Second)
				_ = e.waitRequests(wctx, t, before+1)
				wcancel()
				if n := len(t.Requests()) - before; n > 0 {
					detail += fmt.Sprintf(", and drove %d model request(s)", n)
				}
			}
			e.revokedServed(t, how, call.what, detail)
		}
		ctx, cancel := e.ctx(e.Times.Call)
		c, err := harness.DialWebsocket(ctx, b.Base, old, e.Box.DialOptions()...)
		cancel()
		if err == nil {
			e.own(t, fmt.Sprintf("websocket %s on %s with its old credential", t.Name, b.Name()), c)
			c.Close()
			e.revokedServed(t, how, "a new connection to "+b.Name(), "a new connection with the old credential was opened right after it was "+how)
		}
		if e.rotateKey(a, t, old) == "" {
			return
		}
	}
}

// identicalRequests: every tenant is given one model (the first
// secondary tenant's, which the others declare: tenants.Tenant.Share),
// soul, memory and custom prompt, so its provider requests are byte for
// byte another's; then one tenant sends identicalPrompt in a new session
// on its replica, and the others the same prompt at once, each on
// another replica. A response cache keyed without the tenant answers them
// with the first one's answer: its reply canary and tool call in their
// frames and requests. The control: each answer carries its own reply
// canary.
func (e *Env) identicalRequests() {
	e.T.Helper()
	tg := e.Box.Target
	if !tg.HomesReachable() || tg.Layout.Files.Soul == "" {
		e.skipRow(string(Requests), "identical requests through every replica not tried: the harness cannot make the tenants' homes alike (the target's files are not its to write)")
		return
	}
	for _, op := range []string{"config.set.model", "config.set.prompt"} {
		if why := tg.Dialect.Unsupported(op); why != "" {
			e.skipRow(string(Requests), "identical requests through every replica not tried: "+op+" is unsupported by the target: "+why)
			return
		}
	}
	replicas := e.StartReplicas()
	order := e.Rand.Perm(len(replicas))
	first := e.Tenants[0]
	for _, t := range e.Tenants {
		if !t.Launch {
			first = t
			break
		}
	}
	shared := tenants.Canary{Owner: first.Name, Kind: tenants.Model, Value: first.Model()}
	conns := map[string]*harness.Conn{}
	sids := map[string]string{}
	for i, t := range e.Tenants {
		r := replicas[order[i%len(order)]]
		c := e.dialReplica(r, t)
		conns[t.Name] = c
		own := e.CreateSession(c, t) // shows its own model on the connection
		if t != first {
			if err := t.Share(shared); err != nil {
				e.T.Fatalf("%v", err)
			}
			e.Call(c, "config.set", map[string]any{"key": "model", "value": shared.Value, "session_id": own.SessionID}, nil)
		}
		e.Call(c, "config.set", map[string]any{"key": "prompt", "value": identicalSystem, "session_id": own.SessionID}, nil)
		files := map[string]string{tg.Layout.Files.Soul: identicalSystem + "\n"}
		if tg.Layout.Files.Memory != "" {
			files[tg.Layout.Files.Memory] = ""
		}
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(t.Home, name), []byte(body), 0o644); err != nil {
				e.T.Fatalf("make %s's home alike: %v", t.Name, err)
			}
		}
	}
	// A running server's homes are mirrored here: the alike files reach
	// it with a push.
	pctx, pcancel := e.ctx(e.Times.Call)
	err := e.Box.PushHomes(pctx)
	pcancel()
	if err != nil {
		e.T.Fatalf("make the tenants' homes alike: %v", err)
	}
	marks := map[string]int{}
	for _, t := range e.Tenants {
		sids[t.Name] = e.CreateSession(conns[t.Name], t).SessionID
		marks[t.Name] = len(t.Requests())
		e.ExpectSnapshots(t, 1)
	}
	ends := map[string][]byte{}
	turn := func(ctx context.Context, t *tenants.Tenant) ([]byte, error) {
		ev, err := conns[t.Name].Turn(ctx, sids[t.Name], identicalPrompt)
		return ev.Raw, err
	}
	ctx, cancel := e.ctx(e.Times.Turn)
	end, err := turn(ctx, first)
	cancel()
	if err != nil {
		e.T.Fatalf("identical request of %s: %v", first.Name, e.attributed(first, sids[first.Name], err))
	}
	ends[first.Name] = end
	rest, errs := gatherAtOnce(e, e.Times.Turn, func(ctx context.Context, t *tenants.Tenant) ([]byte, error) {
		if t == first {
			return nil, nil
		}
		return turn(ctx, t)
	})
	for _, t := range e.Tenants {
		if t == first {
			continue
		}
		if err := errs[t.Name]; err != nil {
			e.T.Fatalf("identical request of %s: %v", t.Name, e.attributed(t, sids[t.Name], err))
		}
		ends[t.Name] = rest[t.Name]
	}
	for _, t := range e.Tenants {
		if t.HasProvider() && !bytes.Contains(ends[t.Name], []byte(t.Value(tenants.Reply))) {
			e.replicaControl(t, "identical requests", fmt.Sprintf(
				"the answer to %s's identical request does not carry its own reply canary: no provider of %s gave it (%s)", t.Name, t.Name, truncateText(string(ends[t.Name]), 300)))
		}
	}
	// Whether the requests were alike: where two tenants' providers each
	// got the first request, their bodies must be one.
	firstBody := func(t *tenants.Tenant) []byte {
		reqs := t.Requests()
		for _, r := range reqs[min(marks[t.Name], len(reqs)):] {
			if r.Kind == fakellm.KindMain {
				return r.RawBody
			}
		}
		return nil
	}
	want := firstBody(first)
	for _, t := range e.Tenants {
		if got := firstBody(t); t != first && want != nil && got != nil && !bytes.Equal(got, want) {
			e.skipRow(string(Requests), fmt.Sprintf("identical requests: %s's and %s's provider requests were not byte for byte alike (%d and %d bytes): a cache keyed by the request alone could not mix them up", first.Name, t.Name, len(want), len(got)))
			break
		}
	}
}
