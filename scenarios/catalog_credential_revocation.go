package scenarios

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// credentialRevocation rotates and removes each tenant's credential while
// a connection and a session opened with the old one are live, before a
// turn and in the middle of one: every request after that moment must be
// refused, and drive nothing (agent targets get the offboarding check
// gateways have).
func credentialRevocation() Spec {
	return Spec{
		ID:        "credential-revocation",
		Purpose:   "each tenant's credential is rotated, then removed, while a connection and session opened with it are live (one turn in flight): every call after that moment is refused and no turn takes another step; a control shows the credential worked just before",
		Backends:  []harness.Backend{harness.BackendServe},
		Focus:     []Invariant{invariants.RevokedCredential, invariants.Authz},
		Snapshots: perTenant(1),
		Timeout:   4 * time.Minute,
		Needs:     []Need{NeedFiles, NeedTenantCredentials},
		Responder: revocationResponder,
		Phases: []Phase{
			{Name: "rotate", Run: func(e *Env) { e.revokeEach("rotated") }},
			{Name: "remove", Run: func(e *Env) { e.revokeEach("removed") }},
		},
	}
}

// holdPrompt opens a prompt whose first model request the provider holds
// until the scenario releases it (revocationHolds), then answers with the
// environment probe: a turn in flight across a revocation.
const holdPrompt = "REVOKE-HOLD: "

// revocationHolds are the releases of held turns, by tenant (name and
// tag: unique in a run): a held request waits for its channel.
var revocationHolds sync.Map // string -> *heldTurn

type heldTurn struct {
	arrived chan struct{} // closed when the held request came in
	release chan struct{} // closed by the scenario
	once    sync.Once
}

func holdKey(t *tenants.Tenant) string { return t.Name + "/" + t.Tag }

// revocationResponder holds a holdPrompt's first request until released
// (at most two minutes), then answers as the default responder does.
func revocationResponder(t *tenants.Tenant) fakellm.Responder {
	def := tenants.DefaultResponder(t)
	return func(r fakellm.Record) fakellm.Response {
		if last := lastMessage(r); last["role"] == "user" {
			if text, _ := last["content"].(string); strings.HasPrefix(text, holdPrompt) {
				if v, ok := revocationHolds.Load(holdKey(t)); ok {
					h := v.(*heldTurn)
					h.once.Do(func() { close(h.arrived) })
					select {
					case <-h.release:
					case <-time.After(2 * time.Minute):
					}
				}
			}
		}
		return def(r)
	}
}

// revokeEach revokes every tenant's credential the way how says, one
// tenant at a time, and puts it back after.
func (e *Env) revokeEach(how string) {
	e.T.Helper()
	envName := e.Box.Target.Layout.Files.Env
	keyVar := e.Box.Target.Layout.APIServerKeyEnv
	if e.Server == nil {
		e.StartServe()
	}
	for _, t := range e.Tenants {
		e.revokeOne(t, how, filepath.Join(t.Home, envName), keyVar)
	}
}

// revokeOne opens a connection and a session with t's credential, proves
// they work, holds a turn in flight, revokes the credential (how), and
// checks every later call and the held turn's next step.
func (e *Env) revokeOne(t *tenants.Tenant, how, envPath, keyVar string) {
	e.T.Helper()
	c := e.Dial(e.Server, t)
	s := e.CreateSession(c, t)
	// The control: the credential works just before.
	ctl := e.CreateSession(c, t)
	if ctl.SessionID == "" {
		e.Find(invariants.Finding{Invariant: invariants.Control, Tenant: t.Name, Where: invariants.Where{Label: "websocket " + t.Name},
			Detail: "the credential did not open a session just before its revocation"})
		return
	}
	h := &heldTurn{arrived: make(chan struct{}), release: make(chan struct{})}
	revocationHolds.Store(holdKey(t), h)
	defer revocationHolds.Delete(holdKey(t))
	defer h.once.Do(func() {}) // nothing more arrives after the phase

	mark := c.EventCount()
	ctx, cancel := e.ctx(e.Times.Call)
	defer cancel()
	if err := c.Call(ctx, "prompt.submit", map[string]any{"session_id": s.SessionID, "text": holdPrompt + "run the environment probe"}, nil); err != nil {
		e.T.Fatalf("%s's held turn: %v", t.Name, err)
	}
	select {
	case <-h.arrived:
	case <-ctx.Done():
		close(h.release)
		e.T.Fatalf("%s's held turn never reached its provider", t.Name)
	}

	old, err := os.ReadFile(envPath)
	if err != nil {
		e.T.Fatalf("read %s's credential: %v", t.Name, err)
	}
	next := ""
	if how == "rotated" {
		k, err := t.Mint(tenants.APIServerKey)
		if err != nil {
			e.T.Fatalf("%v", err)
		}
		next = k.Value
	}
	if err := os.WriteFile(envPath, []byte(withVar(string(old), keyVar, next)), 0o600); err != nil {
		e.T.Fatalf("revoke %s's credential: %v", t.Name, err)
	}
	e.pushHomes("revoke " + t.Name + "'s credential")
	revoked := time.Now()
	before := len(t.Provider.Requests())
	close(h.release)

	// The held turn ends, one way or the other; then nothing more may come
	// of it.
	_, _ = c.WaitEvent(ctx, mark, "the end of the held turn", func(ev harness.Event) bool { return c.TurnEnd(ev, s.SessionID) })
	if n := len(t.Provider.Requests()) - before; n > 0 {
		e.revokedServed(t, how, "the turn in flight", fmt.Sprintf("took %d more model request(s) after the credential was %s (%s after)", n, how, time.Since(revoked).Round(time.Millisecond)))
	}
	if snaps := e.snapshotsSince(t, before); snaps > 0 {
		e.revokedServed(t, how, "the turn in flight", fmt.Sprintf("ran its tool after the credential was %s: %d environment snapshot(s)", how, snaps))
	}

	calls := []struct {
		what, method string
		params       map[string]any
	}{
		{"a turn on the open session", "prompt.submit", map[string]any{"session_id": ctl.SessionID, "text": "Run the environment probe for " + t.Name + "."}},
		{"config.set by the open session", "config.set", map[string]any{"session_id": ctl.SessionID, "key": "prompt", "value": "revoked " + how}},
		{"model.save_key by the open session", "model.save_key", map[string]any{"session_id": ctl.SessionID, "slug": "revoked", "api_key": "revoked-" + how}},
		{"a new session", "session.create", map[string]any{}},
	}
	for _, call := range calls {
		before := len(t.Provider.Requests())
		cctx, ccancel := e.ctx(30 * time.Second)
		var res any
		err := c.Call(cctx, call.method, call.params, &res)
		ccancel()
		var rerr *harness.RPCError
		var uerr *harness.UnsupportedError
		switch {
		case errors.As(err, &rerr):
			continue // refused
		case errors.As(err, &uerr):
			e.skipRow(string(invariants.RevokedCredential), fmt.Sprintf("%s not tried: %s", call.what, uerr.Reason))
			continue
		case err != nil:
			continue // the connection was closed: refused
		}
		detail := fmt.Sprintf("%s was answered after the credential was %s", call.what, how)
		if call.method == "prompt.submit" {
			wctx, wcancel := e.ctx(30 * time.Second)
			_ = e.waitRequests(wctx, t, before+1)
			wcancel()
			if n := len(t.Provider.Requests()) - before; n > 0 {
				detail += fmt.Sprintf(", and drove %d model request(s)", n)
			}
		}
		e.revokedServed(t, how, call.what, detail)
	}
	if err := os.WriteFile(envPath, old, 0o600); err != nil {
		e.T.Fatalf("put %s's credential back: %v", t.Name, err)
	}
	e.pushHomes("put " + t.Name + "'s credential back")
}

// withVar is a .env text with name's line set to value, or removed when
// value is empty.
func withVar(env, name, value string) string {
	var out []string
	for _, l := range strings.Split(strings.TrimRight(env, "\n"), "\n") {
		if k, _, ok := strings.Cut(l, "="); ok && strings.TrimSpace(strings.TrimPrefix(k, "export ")) == name {
			continue
		}
		out = append(out, l)
	}
	if value != "" {
		out = append(out, name+"="+value)
	}
	return strings.Join(out, "\n") + "\n"
}

// revokedServed records a request served on a revoked credential.
func (e *Env) revokedServed(t *tenants.Tenant, how, what, detail string) {
	e.Find(invariants.Finding{Invariant: invariants.RevokedCredential, Tenant: t.Name,
		Where: invariants.Where{Label: "websocket " + t.Name}, Place: how + ": " + what, Detail: detail})
}

// snapshotsSince counts the environment snapshots among t's provider
// requests from index from on.
func (e *Env) snapshotsSince(t *tenants.Tenant, from int) int {
	reqs := t.Provider.Requests()
	n := 0
	for _, r := range reqs[min(from, len(reqs)):] {
		if b, _ := json.Marshal(r.Body); strings.Contains(string(b), "SNAPSHOT-BEGIN") {
			n++
		}
	}
	return n
}

// waitRequests waits until t's provider has n requests or ctx ends.
func (e *Env) waitRequests(ctx context.Context, t *tenants.Tenant, n int) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for len(t.Provider.Requests()) < n {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}
