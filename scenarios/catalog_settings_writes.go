package scenarios

import (
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
	out := writableCopy(m)
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
			{Name: "connect", Run: func(e *Env) { e.serveSessions(0) }},
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
					dir := e.mintWorkdir(t)
					e.ScopedWrite("config.set cwd "+how, t, configWrite, func() {
						e.Call(c, "config.set", with(addr, "key", "cwd", "value", dir), nil)
					})
					prompt := e.mint(t, "custom_prompt")
					e.ScopedWrite("config.set prompt "+otherHow, t, configWrite, func() {
						e.Call(c, "config.set", with(other, "key", "prompt", "value", prompt.Value), nil)
					})
					key := e.mint(t, tenants.SavedKey)
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

// saveKeySlug is the slug tenant t saves its key under in settings-writes:
// its own (canary_<name>), which no other profile has.
func saveKeySlug(t *tenants.Tenant) string {
	return "canary_" + strings.ReplaceAll(t.Name, "-", "_")
}
