package scenarios

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Colliding inputs: every tenant sends byte-identical inputs at the same
// time, so a cache (of answers, sessions, jobs) keyed without the tenant
// serves one tenant's result to another. Every answer a tenant's provider
// gives carries that tenant's reply canary, so an answer served to the
// wrong tenant is a foreign canary in its frames, stored turns and next
// requests, which the scans report; the own-reply control proves each
// tenant's answers came from its own provider.

// collidePrompt is the prompt every tenant sends, byte for byte.
const collidePrompt = "Colliding input: run the environment probe."

// Cron job name and prompt every tenant gives its job, byte for byte.
const (
	collideJob       = "collide-job"
	collideJobPrompt = "Colliding job: run the environment probe."
)

// allAtOnce runs do for every tenant at once, released together, and
// returns each tenant's error.
func (e *Env) allAtOnce(do func(t *tenants.Tenant) error) map[string]error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := map[string]error{}
	start := make(chan struct{})
	for _, t := range e.Tenants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			err := do(t)
			mu.Lock()
			errs[t.Name] = err
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

// gatherAtOnce is allAtOnce for a call with a result: each tenant's call
// has within, and what each got is kept by tenant beside its error.
func gatherAtOnce[R any](e *Env, within time.Duration, do func(ctx context.Context, t *tenants.Tenant) (R, error)) (map[string]R, map[string]error) {
	var mu sync.Mutex
	got := map[string]R{}
	errs := e.allAtOnce(func(t *tenants.Tenant) error {
		ctx, cancel := e.ctx(within)
		defer cancel()
		r, err := do(ctx, t)
		mu.Lock()
		got[t.Name] = r
		mu.Unlock()
		return err
	})
	return got, errs
}

// collideTurns has every tenant send collidePrompt at once on its session
// in sids, and checks that each answer is its own provider's (its own
// reply canary in the turn's end).
func (e *Env) collideTurns(sids map[string]string, what string) {
	e.T.Helper()
	e.collideTurnsAs(sids, what, func(ctx context.Context, c *harness.Conn, sid string) (harness.Event, error) {
		return c.Turn(ctx, sid, collidePrompt)
	})
}

// collideTurnsAs is collideTurns with each tenant's turn run by turn.
func (e *Env) collideTurnsAs(sids map[string]string, what string, turn func(ctx context.Context, c *harness.Conn, sid string) (harness.Event, error)) {
	e.T.Helper()
	for _, t := range e.Tenants {
		e.ExpectSnapshots(t, 1)
	}
	ends, errs := gatherAtOnce(e, 2*time.Minute, func(ctx context.Context, t *tenants.Tenant) ([]byte, error) {
		ev, err := turn(ctx, e.Conns[t.Name], sids[t.Name])
		return ev.Raw, err
	})
	for _, t := range e.Tenants {
		if err := errs[t.Name]; err != nil {
			e.T.Fatalf("%s: turn of %s: %v", what, t.Name, e.attributed(t, sids[t.Name], err))
		}
		if !bytes.Contains(ends[t.Name], []byte(t.Value(tenants.Reply))) {
			e.Find(invariants.Finding{Invariant: invariants.Control, Tenant: t.Name, Where: invariants.Where{Label: what},
				Detail: fmt.Sprintf("the answer to %s's colliding prompt does not carry its own reply canary: no provider of %s gave it (%s)", t.Name, t.Name, truncateText(string(ends[t.Name]), 300))})
		}
	}
}

// collideCron gives every tenant a cron job of the same name and prompt at
// once, fires them all, and checks that each tenant's job list holds only
// its own job.
func (e *Env) collideCron() {
	e.T.Helper()
	if why := e.Box.Target.Dialect.Unsupported("cron.create"); why != "" {
		e.skipRow(string(Files), "colliding cron job names not tried: cron.create is unsupported by the target: "+why)
		return
	}
	ids, errs := gatherAtOnce(e, time.Minute, func(ctx context.Context, t *tenants.Tenant) (string, error) {
		var res struct {
			Job cronJob `json:"job"`
		}
		err := e.Conns[t.Name].Call(ctx, "cron.create", map[string]any{"profile": profileParam(t), "name": collideJob,
			"prompt": collideJobPrompt, "every": "every 1h"}, &res)
		return res.Job.ID, err
	})
	for _, t := range e.Tenants {
		if errs[t.Name] != nil || ids[t.Name] == "" {
			e.T.Fatalf("cron.create %s for %s: %v (id %q)", collideJob, t.Name, errs[t.Name], ids[t.Name])
		}
	}
	since := map[string]time.Time{}
	for _, t := range e.Tenants {
		since[t.Name] = e.TriggerCron(e.Conns[t.Name], t, ids[t.Name])
	}
	for _, t := range e.Tenants {
		e.WaitCron(e.Conns[t.Name], t, ids[t.Name], since[t.Name])
		var res struct {
			Jobs []cronJob `json:"jobs"`
		}
		e.Call(e.Conns[t.Name], "cron.list", map[string]any{"profile": profileParam(t)}, &res)
		for _, j := range res.Jobs {
			for _, o := range e.Tenants {
				if o != t && j.ID == ids[o.Name] && ids[o.Name] != ids[t.Name] {
					e.Find(invariants.Finding{Invariant: invariants.Authz, Tenant: t.Name, Owner: o.Name, Where: invariants.Where{Label: "cron.list of " + t.Name, Method: "cron.list"},
						Detail: fmt.Sprintf("%s's job list holds %s's job %s of the same name %q", t.Name, o.Name, j.ID, collideJob)})
				}
			}
		}
	}
	seen := map[string]string{}
	for _, t := range e.Tenants {
		if o, ok := seen[ids[t.Name]]; ok {
			e.Find(invariants.Finding{Invariant: invariants.Authz, Tenant: t.Name, Owner: o, Where: invariants.Where{Label: "cron.create " + collideJob, Method: "cron.create"},
				Detail: fmt.Sprintf("cron.create of the same name gave %s and %s one job id %s", o, t.Name, ids[t.Name])})
		}
		seen[ids[t.Name]] = t.Name
	}
}

// collideChats has every tenant post the same chat body at once to its own
// gateway route, twice (the second round meets what the first cached), and
// checks that each reply is its own provider's.
func (e *Env) collideChats() {
	e.T.Helper()
	if ok, why := e.Box.Target.Supports(harness.BackendGateway); !ok {
		e.skipRow(string(Text), "colliding gateway chats not tried: "+why)
		return
	}
	g := e.StartGateway()
	for round := 1; round <= 2; round++ {
		for _, t := range e.Tenants {
			e.ExpectSnapshots(t, 1)
		}
		replies, errs := gatherAtOnce(e, 2*time.Minute, func(ctx context.Context, t *tenants.Tenant) (harness.GatewayReply, error) {
			return g.Client.Chat(ctx, harness.RoutePath(t.Name, t.Launch), t.APIServerKey(), collidePrompt, false)
		})
		for _, t := range e.Tenants {
			r := replies[t.Name]
			if errs[t.Name] != nil {
				e.T.Fatalf("colliding gateway chat of %s, round %d: %v", t.Name, round, errs[t.Name])
			}
			e.KeepText(t, fmt.Sprintf("gateway reply to %s's colliding chat, round %d", t.Name, round), r.Body)
			if !bytes.Contains(r.Body, []byte(t.Value(tenants.Reply))) {
				e.Find(invariants.Finding{Invariant: invariants.Control, Tenant: t.Name, Where: invariants.Where{Label: "gateway chat"},
					Detail: fmt.Sprintf("the gateway's reply to %s's colliding chat (round %d, HTTP %d) does not carry its own reply canary: no provider of %s gave it", t.Name, round, r.Status, t.Name)})
			}
		}
	}
}

// collideModel has two tenants share one model name, where the target
// lets a profile name any model: the second takes the first's (both
// declare it: tenants.Tenant.Share, so it is no leak in either's
// requests), and every tenant then sends collidePrompt at once in new
// sessions. A cache keyed by model and prompt but not by tenant answers one
// of the two with the other's reply, whose reply canary is foreign to it;
// a request of either carrying the other's key or marker is still a leak.
// The control: the second tenant's provider was asked for the shared
// model, so the phase tested what it says.
func (e *Env) collideModel() {
	e.T.Helper()
	if why := e.Box.Target.Dialect.Unsupported("config.set"); why != "" {
		e.skipRow(string(Requests), "a shared model name not tried: config.set is unsupported by the target: "+why)
		return
	}
	a, b := e.Tenants[0], e.Tenants[1]
	shared := tenants.Canary{Owner: a.Name, Kind: tenants.Model, Value: a.Model()}
	if err := b.Share(shared); err != nil {
		e.T.Fatalf("%v", err)
	}
	setModel := func(t *tenants.Tenant, model string) error {
		ctx, cancel := e.ctx(e.Times.Call)
		defer cancel()
		return e.Conns[t.Name].Call(ctx, "config.set", map[string]any{"key": "model", "value": model, "session_id": e.Sessions[t.Name].SessionID}, nil)
	}
	if err := setModel(b, shared.Value); err != nil {
		if isRefusal(err) {
			e.skipRow(string(Requests), fmt.Sprintf("a shared model name not tried: the target refused %s's model %q for %s: %v", a.Name, shared.Value, b.Name, err))
			return
		}
		e.T.Fatalf("config.set model of %s: %v", b.Name, err)
	}
	before := len(b.Requests())
	sids := map[string]string{}
	for _, t := range e.Tenants {
		sids[t.Name] = e.CreateSession(e.Conns[t.Name], t).SessionID
	}
	e.collideTurns(sids, "colliding prompts with a shared model")
	asked := false
	for _, r := range b.Requests()[before:] {
		asked = asked || r.Kind == fakellm.KindMain && r.Model() == shared.Value
	}
	if !asked {
		e.Find(invariants.Finding{Invariant: invariants.Control, Tenant: b.Name, Where: invariants.Where{Label: "shared model"},
			Detail: fmt.Sprintf("%s's provider was never asked for the model %q it shares with %s: the shared-model phase tested nothing", b.Name, shared.Value, a.Name)})
	}
	if err := setModel(b, b.Model()); err != nil {
		e.T.Fatalf("config.set model of %s back: %v", b.Name, err)
	}
}

// collideStatePlugin is the plugin of the colliding plugin state keys: one
// tool that keeps a value under a key in the session's plugin state (when
// given one) and answers what the key holds.
const (
	collideStatePlugin = "collidestate"
	collideStateTool   = "collide_state"
	collideStateKey    = "collide-key"
	collideStateSource = `package collidestate

import (
	"context"

	"github.com/tenantcanary/tenantcanary/plugin"
)

func Register(pctx plugin.Context) error {
	return pctx.RegisterTool(plugin.Tool{Name: "` + collideStateTool + `", Toolset: "canary",
		Description: "keeps a value under a key in the session's state and reads it back",
		Schema:      map[string]any{"type": "object", "properties": map[string]any{}},
		ContextHandler: func(c context.Context, args map[string]any) (string, error) {
			key, _ := args["key"].(string)
			if v, ok := args["value"].(string); ok {
				if err := pctx.State().Set(c, key, v); err != nil {
					return "", err
				}
			}
			got, err := pctx.State().Get(c, key)
			if err != nil {
				return "", err
			}
			return "STATE " + key + "=" + got + "\n` + attack.RowDone + `", nil
		}})
}
`
)

// collideStateWhy says why the plugin state keys cannot collide on this
// target ("" when they can): the harness installs the plugin in the homes.
func (e *Env) collideStateWhy() string {
	if !e.Box.Target.HomesReachable() {
		return "the target's homes are not the harness's to install a plugin in"
	}
	return e.Box.Target.AgentdPluginsUnsupported()
}

// installCollideState puts the state plugin in every tenant's home, before
// the server starts.
func (e *Env) installCollideState() {
	e.T.Helper()
	if e.collideStateWhy() != "" {
		return
	}
	for _, t := range e.Tenants {
		err := e.Box.WriteHome(t, tenants.HomeExtras{Files: map[string]string{
			"plugins/" + collideStatePlugin + "/plugin.yaml": "name: " + collideStatePlugin + "\nversion: \"1.0\"\nkind: general\n",
			"plugins/" + collideStatePlugin + "/plugin.go":   collideStateSource,
		}})
		if err != nil {
			e.T.Fatalf("install the state plugin for %s: %v", t.Name, err)
		}
	}
	// A running server takes plugins installed in its homes through its
	// own reload (remote.reload).
	ctx, cancel := e.ctx(e.Times.Call)
	defer cancel()
	if err := e.Box.ReloadPlugins(ctx); err != nil {
		e.T.Fatalf("install the state plugin: %v", err)
	}
}

// collideState has every tenant store a value of its own under one plugin
// state key at the same moment, then read the key back at the same
// moment: a plugin state keyed without the tenant (or the session) gives
// one tenant another's value, a foreign canary in its tool result. The
// control: each tenant reads back the value it stored.
func (e *Env) collideState() {
	e.T.Helper()
	if why := e.collideStateWhy(); why != "" {
		e.skipRow(string(Requests), "colliding plugin state keys not tried: "+why)
		return
	}
	values := map[string]string{}
	for _, t := range e.Tenants {
		values[t.Name] = e.mint(t, "state_value").Value
	}
	call := func(t *tenants.Tenant, id string, args map[string]any) string {
		row := attack.Row{ID: id, Class: attack.Write, Tries: "keep a value under the state key every tenant uses", Refusal: "nothing to refuse: its own state",
			Call: func(attack.Canaries) attack.Call { return attack.Call{Tool: collideStateTool, Args: args} }}
		return e.Attack(e.Conns[t.Name], t, e.Sessions[t.Name].SessionID, row, attack.Canaries{})
	}
	got := map[string]string{}
	var mu sync.Mutex
	for _, step := range []string{"set", "get"} {
		e.allAtOnce(func(t *tenants.Tenant) error {
			args := map[string]any{"key": collideStateKey}
			if step == "set" {
				args["value"] = values[t.Name]
			}
			res := call(t, "collide-state-"+step, args)
			mu.Lock()
			got[t.Name] = res
			mu.Unlock()
			return nil
		})
	}
	for _, t := range e.Tenants {
		want := "STATE " + collideStateKey + "=" + values[t.Name]
		if !strings.Contains(got[t.Name], want) {
			e.Find(invariants.Finding{Invariant: invariants.Control, Tenant: t.Name, Where: invariants.Where{Label: "plugin state " + collideStateKey},
				Detail: fmt.Sprintf("%s did not read back the value it stored under %q (%s): got %s", t.Name, collideStateKey, values[t.Name], truncateText(got[t.Name], 200))})
		}
	}
}

func collidingInputs() Spec {
	return Spec{
		ID:        "colliding-inputs",
		Purpose:   "every tenant sends byte-identical prompts, sessions, cron jobs, gateway chats and requests (ids included, then replayed) at the same time: no cache keyed without the tenant serves one tenant's answer to another",
		Backends:  []harness.Backend{harness.BackendServe},
		Focus:     []Invariant{Requests, Text, Files, invariants.RPC, invariants.Authz, PositiveControl},
		Snapshots: perTenant(5),
		Timeout:   4 * time.Minute,
		Responder: attack.Responder,
		Phases: []Phase{
			{Name: "connect", Run: func(e *Env) {
				e.installCollideState()
				e.serveSessions(0)
			}},
			{Name: "same-prompts", Run: func(e *Env) {
				// Twice: the second round finds whatever the first left in a
				// shared cache.
				sids := map[string]string{}
				for _, t := range e.Tenants {
					sids[t.Name] = e.Sessions[t.Name].SessionID
				}
				e.collideTurns(sids, "colliding prompts, round 1")
				e.collideTurns(sids, "colliding prompts, round 2")
			}},
			{Name: "same-sessions", Run: func(e *Env) {
				// New sessions made at once, each then asked the same.
				sids := map[string]string{}
				var mu sync.Mutex
				errs := e.allAtOnce(func(t *tenants.Tenant) error {
					ctx, cancel := context.WithTimeout(e.Ctx, time.Minute)
					defer cancel()
					s, err := e.Conns[t.Name].CreateSession(ctx, profileParam(t))
					mu.Lock()
					defer mu.Unlock()
					sids[t.Name] = s.SessionID
					if err == nil {
						e.mu.Lock()
						e.sessions = append(e.sessions, session{tenant: t, info: s})
						e.mu.Unlock()
					}
					return err
				})
				for _, t := range e.Tenants {
					if errs[t.Name] != nil {
						e.SkipUnsupported(errs[t.Name])
						e.T.Fatalf("session.create of %s: %v", t.Name, errs[t.Name])
					}
				}
				ids := map[string]bool{}
				for _, t := range e.Tenants {
					if ids[sids[t.Name]] {
						e.Find(invariants.Finding{Invariant: invariants.Authz, Tenant: t.Name, Where: invariants.Where{Label: "session.create"},
							Detail: fmt.Sprintf("sessions made at once for different tenants got one id %s", sids[t.Name])})
					}
					ids[sids[t.Name]] = true
				}
				e.collideTurns(sids, "colliding prompts in new sessions")
			}},
			{Name: "same-model", Run: func(e *Env) { e.collideModel() }},
			{Name: "same-state-keys", Run: func(e *Env) { e.collideState() }},
			{Name: "same-cron", Run: func(e *Env) { e.collideCron() }},
			{Name: "same-chats", Run: func(e *Env) { e.collideChats() }},
			// Last: it sets each tenant's custom prompt and saves a key.
			{Name: "collide-methods", Run: func(e *Env) { e.collideMethods() }},
		},
	}
}
