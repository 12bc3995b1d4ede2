package scenarios

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// surfacesResponder answers an IMAGE prompt with an image_generate call,
// and everything else as the default responder does.
func surfacesResponder(t *tenants.Tenant) fakellm.Responder {
	def := tenants.DefaultResponder(t)
	return func(r fakellm.Record) fakellm.Response {
		last := lastMessage(r)
		switch last["role"] {
		case "user":
			text, _ := last["content"].(string)
			if prompt, ok := strings.CutPrefix(text, surfacesImagePrompt); ok {
				return fakellm.ToolCall("image_generate", map[string]any{"prompt": prompt, "options": map[string]any{"size": "64x64"}})
			}
		case "tool":
			if last["name"] == "image_generate" {
				return fakellm.Text("drawn for " + t.Name)
			}
		}
		return def(r)
	}
}

// surfaceRecord is one line the surfaces plugin wrote.
type surfaceRecord struct {
	Kind    string         `json:"kind"`  // hook, memory
	Event   string         `json:"event"` // the hook event or the memory method
	Session string         `json:"session"`
	Pid     int            `json:"pid"`  // in the host's own PID namespace: the server's pid only in process
	Host    string         `json:"host"` // unique per host process
	Data    map[string]any `json:"data"`
	raw     string
}

// surfacesState is what plugin-surfaces keeps between phases.
type surfacesState struct {
	sandboxed bool
	hostID    map[string]string   // each tenant's plugin host before the kill (surfaceRecord.Host)
	turns     map[string][]string // the canaries each tenant's turns carried
	closed    map[string][]string // each tenant's sessions that ended
	images    map[string][]string // the canaries each tenant's image prompts carried
	killed    bool
}

// surfacesRecords reads what t's plugin wrote so far.
func (e *Env) surfacesRecords(t *tenants.Tenant) []surfaceRecord {
	e.T.Helper()
	if fs := e.pullHomes(e.Ctx); fs != nil { // a running server's, through remote:
		e.T.Fatalf("%s", fs[0].Detail)
	}
	var out []surfaceRecord
	for _, name := range []string{surfacesObserved, surfacesModelLog} {
		b, err := os.ReadFile(filepath.Join(t.Home, name))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var r surfaceRecord
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				r.raw = sc.Text()
				out = append(out, r)
			}
		}
	}
	return out
}

// sessionOwners maps every live session id the scenario opened to its
// tenant.
func (e *Env) sessionOwners() map[string]*tenants.Tenant {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]*tenants.Tenant{}
	for _, s := range e.sessions {
		out[s.info.SessionID] = s.tenant
	}
	return out
}

// surfaceTurn runs one turn of t's session sid whose text carries a fresh
// canary of t (the memory provider must remember it) and whose tools run
// the env probe (the tool hooks must see it).
func (e *Env) surfaceTurn(c *harness.Conn, t *tenants.Tenant, sid string) {
	e.T.Helper()
	mark := e.mint(t, "surface_turn")
	st := stateOf(e, surfacesKey)
	st.turns[t.Name] = append(st.turns[t.Name], mark.Value)
	e.ExpectSnapshots(t, 1)
	e.Prompt(c, t, sid, "Run the environment probe, and remember "+mark.Value+".")
}

// checkSurfaces checks what every tenant's hooks and memory provider saw:
// only calls of its own sessions, in its own host (positive controls: its
// own turns, tool calls and canaries are there). Foreign canaries in what
// they wrote are the file scan's findings; foreign sessions are this
// check's (every record is checked again in every phase).
func (e *Env) checkSurfaces(phase string) {
	e.T.Helper()
	st := stateOf(e, surfacesKey)
	owners := e.sessionOwners()
	for _, t := range e.Tenants {
		recs := e.surfacesRecords(t)
		where := invariants.Where{Path: filepath.Join(t.Home, surfacesObserved), Label: "plugin " + SurfacesPlugin + " of " + t.Name}
		seen := map[string]bool{}
		bySession := map[string]bool{} // event + " " + session id
		hosts := map[string]bool{}
		var all strings.Builder
		for _, r := range recs {
			seen[r.Kind+"/"+r.Event] = true
			bySession[r.Event+" "+r.Session] = true
			if r.Host != "" {
				hosts[r.Host] = true
			}
			all.WriteString(r.raw + "\n")
			if r.Pid == e.Server.Pid() {
				e.Find(invariants.Finding{Invariant: invariants.PluginBoundary, Tenant: t.Name, Where: where,
					Detail: fmt.Sprintf("the %s %s ran inside the pooled server's process (pid %d)", r.Kind, r.Event, r.Pid)})
			}
			sids := []string{r.Session}
			if s, _ := r.Data["session_id"].(string); s != "" {
				sids = append(sids, s)
			}
			for _, sid := range sids {
				owner := owners[sid]
				switch {
				case sid == "":
					e.Find(invariants.Finding{Invariant: invariants.SessionContext, Tenant: t.Name, Where: where,
						Detail: fmt.Sprintf("the %s %s ran as no session", r.Kind, r.Event)})
				case owner == nil:
					e.Find(invariants.Finding{Invariant: invariants.SessionContext, Tenant: t.Name, Where: where,
						Detail: fmt.Sprintf("the %s %s ran for session %s, which is none of the scenario's", r.Kind, r.Event, sid)})
				case owner != t:
					e.Find(invariants.Finding{Invariant: invariants.SessionContext, Tenant: t.Name, Owner: owner.Name, Where: where,
						Detail: fmt.Sprintf("%s's %s %s ran for %s's session %s", t.Name, r.Kind, r.Event, owner.Name, sid)})
				}
			}
		}
		control := func(ok bool, what string) {
			if !ok {
				e.Find(invariants.Finding{Invariant: invariants.Control, Tenant: t.Name, Where: where,
					Detail: phase + ": " + what})
			}
		}
		// Positive controls: every hook point and memory method ran, and
		// what they were given is this tenant's own.
		for _, ev := range surfacesHooks {
			if ev != "on_session_end" { // checked per ended session below
				control(seen["hook/"+ev], "the "+ev+" hook never ran")
			}
		}
		for _, m := range []string{"initialize", "prefetch", "sync_turn"} {
			control(seen["memory/"+m], "the memory provider's "+m+" never ran")
		}
		text := all.String()
		control(strings.Contains(text, t.Model()), "the model call hooks never saw its own model")
		control(strings.Contains(text, t.Value(tenants.ShellState)), "the tool call hooks never saw its own probe command")
		control(strings.Contains(text, t.Value(tenants.EnvMarker)), "the tool call hooks never saw its own env marker in a result")
		for _, mark := range st.turns[t.Name] {
			control(strings.Contains(text, mark), "the memory provider was never given its own turn carrying "+mark)
		}
		for sid, owner := range owners {
			if owner == t {
				control(bySession["on_session_start "+sid], "no session start hook ran as its session "+sid)
			}
		}
		for _, sid := range st.closed[t.Name] {
			control(bySession["on_session_end "+sid], "no session end hook ran as its session "+sid)
			control(bySession["shutdown "+sid], "the memory provider was never shut down for its session "+sid)
		}
		for _, mark := range st.images[t.Name] {
			control(bySession["generate "+e.Sessions[t.Name].SessionID] && strings.Contains(text, mark),
				"the image provider was never given its own prompt "+mark+" as its session")
			control(e.requestHas(t, "drawn:"+mark), "the image provider's result for "+mark+" never reached its own provider")
		}
		control(seen["model/build_extra_body"], "the model provider's BuildExtraBody never ran")
		e.checkExtraBody(t, owners)
		// The memory provider's state is in its own home, with its own
		// turns (a running server's, pulled with the records above).
		state, err := os.ReadFile(filepath.Join(t.Home, surfacesMemory))
		control(err == nil, fmt.Sprintf("the memory provider kept no state in its home (%v)", err))
		for _, mark := range st.turns[t.Name] {
			control(bytes.Contains(state, []byte(mark)), "the memory provider's state lacks its own turn "+mark)
		}
		if len(st.turns[t.Name]) > 1 {
			control(e.remembered(t, st.turns[t.Name][0]), "no later turn's request carried what the memory provider remembered")
		}
		if len(hosts) == 0 {
			continue
		}
		if _, ok := st.hostID[t.Name]; !ok {
			st.hostID[t.Name] = recs[0].Host
		}
		if st.killed {
			var list []string
			for h := range hosts {
				list = append(list, h)
			}
			sort.Strings(list)
			control(len(hosts) > 1, fmt.Sprintf("every record came from one host (%v): its killed host was never replaced", list))
			main := e.Sessions[t.Name].SessionID
			reinit := false
			for _, r := range recs {
				reinit = reinit || (r.Event == "initialize" && r.Session == main && r.Host != st.hostID[t.Name])
			}
			control(reinit, "the memory provider of the host that replaced the killed one was never initialised for session "+main)
		}
	}
}

// requestHas reports whether a request on t's provider carries s.
func (e *Env) requestHas(t *tenants.Tenant, s string) bool {
	for _, r := range t.Requests() {
		if bytes.Contains(r.RawBody, []byte(s)) {
			return true
		}
	}
	return false
}

// checkExtraBody checks the extra body t's model provider put on each of
// its model calls: there (positive control), built for a session of t's.
func (e *Env) checkExtraBody(t *tenants.Tenant, owners map[string]*tenants.Tenant) {
	where := invariants.Where{Label: "model calls of " + t.Name}
	for _, r := range t.Requests() {
		if r.Kind != fakellm.KindMain {
			continue
		}
		extra, _ := r.Body[surfacesExtra].(map[string]any)
		sid, _ := extra["session"].(string)
		switch owner := owners[sid]; {
		case extra == nil:
			e.Find(invariants.Finding{Invariant: invariants.Control, Tenant: t.Name, Where: where,
				Detail: fmt.Sprintf("model call %d carries no %s: model.provider plugin:%s did not build it", r.Seq, surfacesExtra, SurfacesModel)})
		case owner == nil:
			e.Find(invariants.Finding{Invariant: invariants.SessionContext, Tenant: t.Name, Where: where,
				Detail: fmt.Sprintf("model call %d's extra body was built for session %q, none of the scenario's", r.Seq, sid)})
		case owner != t:
			e.Find(invariants.Finding{Invariant: invariants.SessionContext, Tenant: t.Name, Owner: owner.Name, Where: where,
				Detail: fmt.Sprintf("model call %d's extra body was built for %s's session %s", r.Seq, owner.Name, sid)})
		}
	}
}

// remembered reports whether a request on t's provider carries what its
// memory provider offers back for mark (prefetch reached the turn's
// system prompt).
func (e *Env) remembered(t *tenants.Tenant, mark string) bool {
	for _, r := range t.Requests() {
		if bytes.Contains(r.RawBody, []byte("remembered: ")) && bytes.Contains(r.RawBody, []byte(mark)) {
			return true
		}
	}
	return false
}

// installSurfacesPlugin puts the surfaces plugin into every tenant's home,
// in host mode, under bubblewrap where it works.
func (e *Env) installSurfacesPlugin() {
	e.T.Helper()
	st := stateOf(e, surfacesKey)
	if why := bwrapUnusable(e); why != "" {
		e.skip("plugin_sandbox", why+": the plugin hosts ran under agentd's default launcher only")
	} else {
		st.sandboxed = true
	}
	for _, t := range e.Tenants {
		plugins := map[string]any{"enabled": []any{SurfacesPlugin, SurfacesModel}, "isolation": "host"}
		if st.sandboxed {
			plugins["host"] = map[string]any{"launcher": e.pluginLauncher(t)}
		}
		model := "plugins/model-providers/" + SurfacesModel + "/"
		err := e.Box.WriteHome(t, tenants.HomeExtras{
			Config: map[string]any{"plugins": plugins, "model": map[string]any{"provider": "plugin:" + SurfacesModel}},
			Files: map[string]string{
				"plugins/" + SurfacesPlugin + "/plugin.yaml": "name: " + SurfacesPlugin + "\nversion: \"1.0\"\nkind: general\n",
				"plugins/" + SurfacesPlugin + "/plugin.go":   surfacesSource,
				model + "plugin.yaml":                        "name: " + SurfacesModel + "\nversion: \"1.0\"\nkind: model-provider\n",
				model + "plugin.go":                          surfacesModelSource,
				// The plugins' data folder ships with them, as an install
				// would make it: under Landlock the launch profile's home
				// is granted entry by entry (its named profiles lie beneath
				// it), so its sandbox can fill a folder there, never add one.
				surfacesObserved: "",
				surfacesModelLog: "",
			},
		})
		if err != nil {
			e.T.Fatalf("install the surfaces plugin for %s: %v", t.Name, err)
		}
	}
	// A running server takes plugins installed in its homes through its
	// own reload (remote.reload).
	ctx, cancel := e.ctx(e.Times.Call)
	defer cancel()
	if err := e.Box.ReloadPlugins(ctx); err != nil {
		e.T.Fatalf("install the surfaces plugin: %v", err)
	}
}

// surfaceWait is how long the end hooks of a closed session have to be
// recorded by some tenant's plugin.
const surfaceWait = 30 * time.Second

// waitSurfaces waits until, for session sid, every event of events was
// recorded by some tenant's plugin (its end hooks run as the session
// closes, the server stops). Where it was recorded is checkSurfaces'
// judgement, not this wait's: a record in another tenant's plugin (a
// faulty target's) decides the wait as well as one in the owner's, so
// only an event recorded nowhere waits out surfaceWait.
func (e *Env) waitSurfaces(sid string, events ...string) {
	e.T.Helper()
	w := Wait{What: "the records of session " + sid + "'s " + strings.Join(events, ", "), Within: surfaceWait, Poll: 25 * time.Millisecond}
	// Unmet, the wait is no harness failure: a missing record is the
	// positive control's finding (checkSurfaces).
	_ = Await(e.Ctx, w, func() (bool, string) {
		seen := map[string]bool{}
		for _, t := range e.Tenants {
			for _, r := range e.surfacesRecords(t) {
				if r.Session == sid || r.Data["session_id"] == sid {
					seen[r.Event] = true
				}
			}
		}
		var missing []string
		for _, ev := range events {
			if !seen[ev] {
				missing = append(missing, ev)
			}
		}
		return len(missing) == 0, "not recorded: " + strings.Join(missing, ", ")
	})
}

// surfacesKey is what plugin-surfaces did and expects its plugins to have
// seen.
var surfacesKey = &stateKey[surfacesState]{"plugin-surfaces"}

func pluginSurfaces() Spec {
	return pluginSpec(Spec{
		ID:        "plugin-surfaces",
		Purpose:   "a plugin per tenant with hooks at every point, a memory, an image and a model provider sees only its own tenant's sessions, turns and tool calls, before and after its host dies",
		Focus:     []Invariant{Requests, Files},
		Timeout:   5 * time.Minute,
		Needs:     []Need{NeedAgentdPlugins, NeedRestart},
		Responder: surfacesResponder,
		Phases: []Phase{
			{Name: "install", Run: func(e *Env) {
				*stateOf(e, surfacesKey) = surfacesState{hostID: map[string]string{}, turns: map[string][]string{}, closed: map[string][]string{},
					images: map[string][]string{}}
				e.installSurfacesPlugin()
				e.serveSessions(0)
			}},
			{Name: "turns", Run: func(e *Env) {
				for round := 0; round < 2; round++ {
					for _, t := range e.permuted(e.Tenants) {
						e.surfaceTurn(e.Conns[t.Name], t, e.Sessions[t.Name].SessionID)
					}
				}
				for _, t := range e.permuted(e.Tenants) {
					mark := e.mint(t, "surface_image")
					st := stateOf(e, surfacesKey)
					st.images[t.Name] = append(st.images[t.Name], mark.Value)
					e.Prompt(e.Conns[t.Name], t, e.Sessions[t.Name].SessionID, surfacesImagePrompt+mark.Value)
				}
				e.checkSurfaces("before the hosts die")
			}},
			{Name: "kill-hosts", Run: func(e *Env) {
				st := stateOf(e, surfacesKey)
				for _, t := range e.Tenants {
					hosts := e.hostsOnServer(t) // real pids (the host's own are in its PID namespace), on the server's host
					if st.hostID[t.Name] == "" || len(hosts) == 0 {
						e.Find(invariants.Finding{Invariant: invariants.Control, Tenant: t.Name,
							Where:  invariants.Where{Label: "plugin host of " + t.Name},
							Detail: "no plugin host of " + t.Name + " was seen to kill: the host-death check was not made"})
						continue
					}
					pids := carrierPids(hosts)
					e.killOnHost("kill the plugin hosts of "+t.Name, pids...)
				}
				st.killed = true
				for _, t := range e.permuted(e.Tenants) {
					e.surfaceTurn(e.Conns[t.Name], t, e.Sessions[t.Name].SessionID)
				}
				e.checkSurfaces("after the hosts died")
			}},
			{Name: "session-end", Run: func(e *Env) {
				st := stateOf(e, surfacesKey)
				for _, t := range e.Tenants {
					c := e.Conns[t.Name]
					s := e.CreateSession(c, t)
					e.surfaceTurn(c, t, s.SessionID)
					e.CloseSession(c, s.SessionID)
					st.closed[t.Name] = append(st.closed[t.Name], s.SessionID)
					e.waitSurfaces(s.SessionID, "on_session_end", "shutdown")
				}
				e.checkSurfaces("after a session closed")
			}},
			{Name: "server-stop", Run: func(e *Env) {
				st := stateOf(e, surfacesKey)
				e.StopServe(e.Server)
				for _, t := range e.Tenants {
					st.closed[t.Name] = append(st.closed[t.Name], e.Sessions[t.Name].SessionID)
				}
				e.checkSurfaces("after the server stopped")
			}},
		},
	})
}
