package scenarios

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// The files a settings write may change in the addressed profile's home.
var (
	configWrite = []string{"config.yaml", "logs/"}
	envWrite    = []string{".env", "logs/"}
)

// lastSnapshot is the newest env snapshot t's provider received.
func (e *Env) lastSnapshot(t *tenants.Tenant) string {
	e.T.Helper()
	snaps := invariants.EnvSnapshots(t, t.Requests())
	if len(snaps) == 0 {
		e.T.Fatalf("%s: no env snapshot reached its provider", t.Name)
	}
	return snaps[len(snaps)-1].Text
}

// lastSystemPrompt is the system message of the newest main request on t's
// provider.
func (e *Env) lastSystemPrompt(t *tenants.Tenant) string {
	recs := t.Requests()
	for i := len(recs) - 1; i >= 0; i-- {
		for _, m := range recs[i].Messages() {
			if role, _ := m["role"].(string); role == "system" {
				s, _ := m["content"].(string)
				return s
			}
		}
	}
	return ""
}

// addressing is how a settings write names its profile.
func addressing(e *Env, t *tenants.Tenant, bySession bool) map[string]any {
	if bySession {
		return map[string]any{"session_id": e.Sessions[t.Name].SessionID}
	}
	return map[string]any{"profile": t.Name}
}

func with(m map[string]any, kv ...any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

func settingsWrites() Spec {
	return Spec{
		ID:        "settings-writes",
		Purpose:   "config.set cwd and prompt and model.save_key, by session and by profile, change only the addressed profile",
		Backends:  []harness.Backend{harness.BackendServe},
		Focus:     []Invariant{WriteScope, EnvSnapshots, Requests},
		Snapshots: perTenant(1),
		Timeout:   3 * time.Minute,
		Needs:     []Need{NeedFiles},
		Phases: []Phase{
			{Name: "connect", Run: func(e *Env) {
				e.ServePerTenant()
				e.OpenSessions()
			}},
			{Name: "writes", Run: func(e *Env) {
				// Every tenant in the seed's order; each saves its key under a
				// slug of its own, so a save that also lands in a profile
				// missing that name (the launch profile's, say) shows.
				for i, t := range e.Shuffled(e.Tenants) {
					// Every tenant makes a config.set by session and one by
					// profile (which is which alternates), whatever order the
					// seed gives.
					addr := addressing(e, t, i%2 == 0)
					how := map[bool]string{true: "by session", false: "by profile"}[i%2 == 0]
					other := addressing(e, t, i%2 != 0)
					otherHow := map[bool]string{true: "by session", false: "by profile"}[i%2 != 0]
					c := e.Conns[t.Name]
					dir, err := t.MintWorkdir()
					if err != nil {
						e.T.Fatalf("%v", err)
					}
					e.ScopedWrite("config.set cwd "+how, t, configWrite, func() {
						e.Call(c, "config.set", with(addr, "key", "cwd", "value", dir), nil)
					})
					prompt, err := t.Mint("custom_prompt")
					if err != nil {
						e.T.Fatalf("%v", err)
					}
					e.ScopedWrite("config.set prompt "+otherHow, t, configWrite, func() {
						e.Call(c, "config.set", with(other, "key", "prompt", "value", prompt.Value), nil)
					})
					key, err := t.Mint(tenants.SavedKey)
					if err != nil {
						e.T.Fatalf("%v", err)
					}
					e.ScopedWrite("model.save_key "+how, t, envWrite, func() {
						e.Call(c, "model.save_key", with(addr, "slug", saveKeySlug(t), "api_key", key.Value), nil)
					})
				}
			}},
			{Name: "next-turns", Run: func(e *Env) {
				// A new session of each profile runs in the new cwd with the new
				// prompt and sees the saved key; no other profile does.
				for _, t := range e.Tenants {
					c := e.Conns[t.Name]
					s := e.CreateSession(c, t)
					e.Turn(c, t, s.SessionID)
					snap := e.lastSnapshot(t)
					dirs := t.Workdirs()
					if want := "CWD=" + dirs[len(dirs)-1] + "\n"; !strings.Contains(snap+"\n", want) {
						e.T.Errorf("%s: the turn after config.set cwd did not run in the new cwd %s", t.Name, dirs[len(dirs)-1])
					}
					for _, m := range t.Minted() {
						switch m.Kind {
						case "custom_prompt":
							if !strings.Contains(e.lastSystemPrompt(t), m.Value) {
								e.T.Errorf("%s: the turn after config.set prompt does not carry the new prompt", t.Name)
							}
						case tenants.SavedKey:
							// Under any <SLUG>_API_KEY: a dialect may map the
							// save to a slug of its own (Hermes takes only
							// the providers it knows).
							if !strings.Contains(snap, "_API_KEY="+m.Value) {
								e.T.Errorf("%s: the turn after model.save_key does not see the saved key", t.Name)
							}
						}
					}
				}
			}},
		},
	}
}

// lifecycleName is the profile the lifecycle scenario creates: gamma, unless
// the run already has a gamma tenant.
func lifecycleName(e *Env) string {
	if e.Box.Set.Get("gamma") == nil {
		return "gamma"
	}
	return "gamma-live"
}

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
			{Name: "connect", Run: func(e *Env) {
				e.ServePerTenant()
				e.OpenSessions()
				e.InterleavedTurns(1)
			}},
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
				g, err := e.Box.Set.AddTenant(name)
				if err != nil {
					e.T.Fatalf("%v", err)
				}
				e.Tenants = append(e.Tenants, g)
				e.created = g
				op := e.DialOperator(e.Server)
				e.ScopedWrite("profiles.create "+name, g, []string{g.Home + "/"}, func() {
					e.Call(op, "profiles.create", map[string]any{"name": name}, &res)
				})
				if !res.OK || res.Name != name {
					e.T.Fatalf("profiles.create %s answered %+v", name, res)
				}
				if res.Path != g.Home {
					e.T.Errorf("profiles.create put %s at %s, want %s", name, res.Path, g.Home)
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
				g := e.created
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
				e.ServePerTenant()
				e.OpenSessions()
				e.InterleavedTurns(1)
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
				if e.Server.Pid() == old.Pid() {
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

func gateway() Spec {
	return Spec{
		ID:        "gateway",
		Purpose:   "each tenant's API key works on its own gateway route; every foreign key on every route is refused and drives nothing",
		Backends:  []harness.Backend{harness.BackendGateway},
		Needs:     []Need{NeedGatewayAccess},
		Focus:     []Invariant{Requests, Text},
		Snapshots: perTenant(1),
		Timeout:   3 * time.Minute,
		Phases: []Phase{
			{Name: "own-keys", Run: func(e *Env) {
				g := e.StartGateway()
				for i, t := range e.Tenants {
					e.ExpectSnapshots(t, 1)
					a := e.gatewayAccess(t)
					ctx, cancel := e.ctx(90 * time.Second)
					r, err := g.Client.Complete(ctx, harness.ChatRequest{Path: e.gatewayChatPath(a), Key: a.Key, Model: a.Models[0],
						Text: "Run the environment probe for " + t.Name + ".", Stream: i%2 == 1})
					cancel()
					if err != nil {
						e.T.Fatalf("gateway chat of %s: %v", t.Name, err)
					}
					e.KeepText(t, "gateway reply to "+t.Name, r.Body)
					if r.Status != http.StatusOK {
						e.T.Errorf("%s's own key on its own route: HTTP %d: %s", t.Name, r.Status, r.Body)
					}
				}
				e.gatewayOf = g
			}},
			{Name: "foreign-keys", Run: func(e *Env) {
				g := e.gatewayOf
				for _, route := range e.Tenants {
					before := len(route.Requests())
					ra := e.gatewayAccess(route)
					path := e.gatewayChatPath(ra)
					for _, key := range e.Tenants {
						if key == route {
							continue
						}
						for _, k := range []string{e.gatewayAccess(key).Key, key.ProviderKey(), ""} {
							ctx, cancel := e.ctx(30 * time.Second)
							r, err := g.Client.Complete(ctx, harness.ChatRequest{Path: path, Key: k, Model: ra.Models[0], Text: "Run the environment probe."})
							cancel()
							if err != nil {
								e.T.Fatalf("gateway chat on %s's route: %v", route.Name, err)
							}
							e.KeepText(route, fmt.Sprintf("gateway reply on %s's route to a foreign key", route.Name), scrubSent(r.Body, harness.ChatRequest{Key: k}))
							if r.Status != http.StatusUnauthorized && r.Status != http.StatusForbidden {
								e.Find(invariants.Finding{Invariant: invariants.Authz, Tenant: route.Name, Owner: key.Name,
									Where:  invariants.Where{Label: "gateway route of " + route.Name, Path: path},
									Detail: fmt.Sprintf("answered HTTP %d to %s's key (want 401 or 403)", r.Status, key.Name), Excerpt: excerpt(r.Body)})
							}
						}
					}
					if after := len(route.Requests()); after != before {
						e.Find(invariants.Finding{Invariant: invariants.Authz, Tenant: route.Name,
							Where:  invariants.Where{Label: "gateway route of " + route.Name},
							Detail: fmt.Sprintf("foreign keys drove %d request(s) to its provider", after-before)})
					}
				}
			}},
		},
	}
}

// gatewayAccess is t's way into an agent server's gateway, from the
// target's llm_gateway.access (NeedGatewayAccess guarantees one).
func (e *Env) gatewayAccess(t *tenants.Tenant) harness.GatewayAccess {
	a := e.Box.Target.LLMGateway.Access.For(t)
	if len(a.Models) == 0 {
		a.Models = []string{t.Model()}
	}
	return a
}

// gatewayChatPath is the chat completions path of access a.
func (e *Env) gatewayChatPath(a harness.GatewayAccess) string {
	return a.BasePath + e.Box.Target.LLMGateway.ChatCompletionsPath()
}

func shellReuse() Spec {
	return Spec{
		ID:        "shell-reuse",
		Purpose:   "interleaved sessions of different tenants on one server: no shell state crosses sessions",
		Backends:  []harness.Backend{harness.BackendServe},
		Focus:     []Invariant{EnvSnapshots},
		Snapshots: perTenant(4),
		Timeout:   3 * time.Minute,
		Phases: []Phase{
			{Name: "interleave", Run: func(e *Env) {
				e.ServePerTenant()
				second := map[string]harness.SessionInfo{}
				e.OpenSessions()
				for _, t := range e.Tenants {
					second[t.Name] = e.CreateSession(e.Conns[t.Name], t)
				}
				// Each session's probe exports its tenant's shell-state canary
				// after the dump: a shell another session reuses shows it.
				for round := 0; round < 2; round++ {
					for _, t := range e.Tenants {
						e.Turn(e.Conns[t.Name], t, e.Sessions[t.Name].SessionID)
					}
					for i := len(e.Tenants) - 1; i >= 0; i-- {
						t := e.Tenants[i]
						e.Turn(e.Conns[t.Name], t, second[t.Name].SessionID)
					}
				}
			}},
		},
	}
}

// saveKeySlug is the slug tenant t saves its key under in settings-writes:
// its own (canary_<name>), which no other profile has.
func saveKeySlug(t *tenants.Tenant) string {
	return "canary_" + strings.ReplaceAll(t.Name, "-", "_")
}
