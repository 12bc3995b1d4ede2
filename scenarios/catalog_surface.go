package scenarios

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/harness/surface"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// surfaceScenario learns the target's surface, then attacks every point of
// it: the adversary is a method, not a list (issue 46).
func surfaceScenario() Spec {
	return Spec{
		ID:        "surface",
		Purpose:   "learns which files of each home the server reads and writes per action and which processes it starts (inside or outside a sandbox, with which tenant variables), then attacks every point: each file it reads in every hostile form, each process outside the sandbox with the loader's, PATH's, shells', Python's and Node's variables from the tenant's own .env",
		Backends:  []harness.Backend{harness.BackendServe},
		Focus:     []Invariant{invariants.UnsandboxedEnv, invariants.ResourceHarm, invariants.File, invariants.Request},
		Snapshots: perTenant(2),
		Timeout:   6 * time.Minute,
		Needs:     []Need{NeedFiles, NeedRestart, NeedServerHere}, // it watches the server's process and its reads
		Responder: surfaceResponder,
		Phases: []Phase{
			{Name: "discover", Run: func(e *Env) { e.discoverSurface() }},
			{Name: "attack-env", Run: func(e *Env) { e.attackSurfaceEnv() }},
			{Name: "attack-shared", Run: func(e *Env) { e.attackSharedPlaces() }},
			{Name: "attack-files", Run: func(e *Env) { e.attackSurfaceFiles() }},
		},
	}
}

// noToolsPrompt opens a prompt the surface responder answers with text
// alone: a turn in which no tool of the tenant's runs, so every event on
// its home is the server's.
const noToolsPrompt = "SURFACE-NO-TOOLS: "

// surfaceResponder answers a no-tools prompt with text, everything else as
// the hostile model does (an attack row's call, else the environment
// probe).
func surfaceResponder(t *tenants.Tenant) fakellm.Responder {
	def := attack.Responder(t)
	return func(r fakellm.Record) fakellm.Response {
		if last := lastMessage(r); last["role"] == "user" {
			if text, _ := last["content"].(string); strings.Contains(text, noToolsPrompt) {
				return fakellm.Text("surface noted for " + t.Name)
			}
		}
		if call, ok := pluginCall(r); ok {
			return call
		}
		return def(r)
	}
}

// surfaceTenant is what the discovery pass made for one tenant.
type surfaceTenant struct {
	conn   *harness.Conn
	sid    string
	stored string
	cron   string
}

// surfaceState is the surface scenario's state: the map, and each
// tenant's connection and session.
type surfaceState struct {
	m   surface.Map
	per map[string]*surfaceTenant
}

var surfaceKey = &stateKey[surfaceState]{"surface"}

// surfaceAction is one action the discovery pass drives and the file
// attacks replay: its name, whether a tool of the tenant's runs in it, and
// how to drive it.
type surfaceAction struct {
	name  string
	tools bool
	need  Need // what the target must support for the action ("" for none)
	run   func(ctx context.Context, e *Env, st *surfaceTenant, t *tenants.Tenant) error
}

// unmet says why the target cannot take a, or "".
func (a surfaceAction) unmet(e *Env) string {
	if a.need == "" {
		return ""
	}
	return a.need.Unmet(e.Box.Target)
}

// surfaceActions are the actions of the protocol, in the order a tenant's
// life takes them.
var surfaceActions = []surfaceAction{
	{name: "session.create", run: func(ctx context.Context, e *Env, st *surfaceTenant, t *tenants.Tenant) error {
		s, err := st.conn.CreateSession(ctx, profileParam(t))
		if err == nil {
			st.sid, st.stored = s.SessionID, s.StoredSessionID
		}
		return err
	}},
	{name: "prompt.submit (no tools)", run: func(ctx context.Context, e *Env, st *surfaceTenant, t *tenants.Tenant) error {
		_, err := st.conn.Turn(ctx, st.sid, noToolsPrompt+"note the surface of "+t.Name)
		return err
	}},
	{name: "prompt.submit (tools)", tools: true, run: func(ctx context.Context, e *Env, st *surfaceTenant, t *tenants.Tenant) error {
		e.ExpectSnapshots(t, 1)
		_, err := st.conn.Turn(ctx, st.sid, "Run the environment probe for "+t.Name+".")
		return err
	}},
	{name: "config.set", run: func(ctx context.Context, e *Env, st *surfaceTenant, t *tenants.Tenant) error {
		return st.conn.Call(ctx, "config.set", map[string]any{"session_id": st.sid, "key": "prompt", "value": "surface prompt of " + t.Name}, nil)
	}},
	{name: "config.set cwd", run: func(ctx context.Context, e *Env, st *surfaceTenant, t *tenants.Tenant) error {
		return st.conn.Call(ctx, "config.set", map[string]any{"profile": profileParam(t), "key": "cwd", "value": t.Workdir}, nil)
	}},
	{name: "config.set model", run: func(ctx context.Context, e *Env, st *surfaceTenant, t *tenants.Tenant) error {
		return st.conn.Call(ctx, "config.set", map[string]any{"session_id": st.sid, "key": "model", "value": t.Model()}, nil)
	}},
	{name: "model.save_key", run: func(ctx context.Context, e *Env, st *surfaceTenant, t *tenants.Tenant) error {
		return st.conn.Call(ctx, "model.save_key", map[string]any{"session_id": st.sid, "slug": "surface", "api_key": "surface-key-of-" + t.Name}, nil)
	}},
	{name: "session.resume", run: func(ctx context.Context, e *Env, st *surfaceTenant, t *tenants.Tenant) error {
		if st.stored == "" {
			return nil
		}
		s, err := st.conn.ResumeSession(ctx, st.stored, profileParam(t))
		if err == nil {
			st.sid = s.SessionID
		}
		return err
	}},
	{name: "plugin tool", tools: true, need: NeedPlugins, run: func(ctx context.Context, e *Env, st *surfaceTenant, t *tenants.Tenant) error {
		// A session of its own: a server may load a profile's plugins as a
		// session opens.
		s, err := st.conn.CreateSession(ctx, profileParam(t))
		if err != nil {
			return err
		}
		args, _ := json.Marshal(pluginArgs{Tag: "surface-" + t.Name})
		_, err = st.conn.Turn(ctx, s.SessionID, pluginPrompt+e.probePlugin().Tools.Probe+" "+string(args))
		return errors.Join(err, st.conn.Call(ctx, "session.close", map[string]any{"session_id": s.SessionID}, nil))
	}},
	{name: "cron", run: func(ctx context.Context, e *Env, st *surfaceTenant, t *tenants.Tenant) error {
		if e.Box.Target.Dialect.Unsupported("cron.create") != "" {
			return nil
		}
		var res struct {
			Job cronJob `json:"job"`
		}
		if err := st.conn.Call(ctx, "cron.create", map[string]any{"profile": profileParam(t), "name": "surface-" + t.Name,
			"prompt": noToolsPrompt + "cron of " + t.Name, "every": "every 1h"}, &res); err != nil {
			return err
		}
		st.cron = res.Job.ID
		return st.conn.Call(ctx, "cron.trigger", map[string]any{"profile": profileParam(t), "id": st.cron}, nil)
	}},
	{name: "session.close", run: func(ctx context.Context, e *Env, st *surfaceTenant, t *tenants.Tenant) error {
		err := st.conn.Call(ctx, "session.close", map[string]any{"session_id": st.sid}, nil)
		st.sid = ""
		return err
	}},
}

// surfaceActionNamed is the action called name.
func surfaceActionNamed(name string) (surfaceAction, bool) {
	i := slices.IndexFunc(surfaceActions, func(a surfaceAction) bool { return a.name == name })
	if i < 0 {
		return surfaceAction{}, false
	}
	return surfaceActions[i], true
}

// tenantVars are the tenants' own .env variables, as the harness wrote
// them.
func (e *Env) tenantVars() surface.Vars {
	vars := surface.Vars{}
	for _, t := range e.Tenants {
		vars[t.Name] = t.DotEnv(e.Box.Target.Layout)
	}
	return vars
}

// serverRoots are the target's process roots: the server (whose pid the
// restart action replaces) first, then every other command of the target
// the harness started itself (a cron tick, say): the run's marked
// processes whose parent is the harness. The recorder calls it from its
// sampler, so it reads the pid from server alone, never e.Server.
func (e *Env) serverRoots(server *atomic.Int64) func() []int {
	runID := e.Box.RunID
	return func() []int {
		pid := int(server.Load())
		return append([]int{pid}, surface.ChildrenOf(os.Getpid(), procgroup.Marked(runID), pid)...)
	}
}

// discoverSurface drives every tenant through every action, one window
// each, while the recorder watches the homes and the server's processes;
// then the cron tick, where the target has one. Every unconfined process
// that carried a tenant's variable is a finding.
func (e *Env) discoverSurface() {
	e.T.Helper()
	e.StartServe()
	var server atomic.Int64
	server.Store(int64(e.Server.Pid()))
	roots := e.serverRoots(&server)
	homes := map[string]string{}
	for _, t := range e.Tenants {
		homes[t.Name] = t.Home
	}
	rec, err := surface.NewRecorder(homes, e.tenantVars(), e.Box.Tmp)
	if err != nil {
		e.T.Fatalf("surface discovery: %v", err)
	}
	defer rec.Close()
	st := stateOf(e, surfaceKey)
	st.per = map[string]*surfaceTenant{}
	for _, t := range e.Tenants {
		st.per[t.Name] = &surfaceTenant{conn: e.Dial(e.Server, t)}
	}
	if NeedPlugins.Unmet(e.Box.Target) == "" {
		// Before any window: a server that discovers a profile's plugins
		// as a session opens shows those reads in session.create.
		e.installProbePlugin(&pluginState{})
	}
	for _, t := range e.Tenants {
		for _, a := range surfaceActions {
			if why := a.unmet(e); why != "" {
				st.m.Blind = append(st.m.Blind, fmt.Sprintf("%s of %s not driven: %s", a.name, t.Name, why))
				continue
			}
			st.m.Actions = append(st.m.Actions, e.recordAction(rec, roots, a.name, t.Name, a.tools, func(ctx context.Context) error {
				return a.run(ctx, e, st.per[t.Name], t)
			}))
		}
	}
	e.discoverLifecycle(rec, roots, st)
	if len(e.Box.Target.CronTick) > 0 {
		st.m.Actions = append(st.m.Actions, e.recordAction(rec, roots, "cron tick", "", true, func(ctx context.Context) error {
			_, err := e.Box.RunCronTick(ctx)
			return err
		}))
	}
	if e.Box.Target.CanRestart() {
		// What a server reads of every home when it starts again.
		st.m.Actions = append(st.m.Actions, e.recordAction(rec, roots, "restart", "", false, func(context.Context) error {
			e.StopServe(e.Server)
			server.Store(0) // between lives: the sampler waits
			server.Store(int64(e.StartServe().Pid()))
			return nil
		}))
		for _, t := range e.Tenants {
			c := e.Dial(e.Server, t)
			s := e.CreateSession(c, t)
			st.per[t.Name].conn, st.per[t.Name].sid, st.per[t.Name].stored = c, s.SessionID, s.StoredSessionID
		}
	}
	st.m.Blind = append(st.m.Blind, fmt.Sprintf("processes that live under %v (sampled from /proc)", surface.SampleEvery),
		"who made a file event in an action with tools (the server or the tenant's own sandboxed tool)")
	e.noteSurface(&st.m)
	for _, a := range st.m.Actions {
		e.carriersFound(a)
	}
	e.surfaceControls(&st.m)
}

// discoverLifecycle records what the server does to a profile's files as
// the operator creates it, deletes it and creates it again under the same
// name: a guest tenant made for it, whose home is watched as its own
// before it exists. The guest is gone (deleted) when it returns.
func (e *Env) discoverLifecycle(rec *surface.Recorder, roots func() []int, st *surfaceState) {
	e.T.Helper()
	for _, op := range []string{"profiles.create", "profiles.delete"} {
		if why := e.Box.Target.Dialect.Unsupported(op); why != "" {
			st.m.Blind = append(st.m.Blind, "a profile's delete and re-create not driven: "+op+" is unsupported: "+why)
			return
		}
	}
	name := "surface-" + lifecycleName(e)
	g := e.addTenant(name)
	if err := rec.Watch(g.Name, g.Home); err != nil {
		e.T.Fatalf("%v", err)
	}
	admin := e.DialOperator(e.Server)
	call := func(method string) func(context.Context) error {
		return func(ctx context.Context) error {
			return admin.Call(ctx, method, map[string]any{"name": name}, nil)
		}
	}
	st.m.Actions = append(st.m.Actions, e.recordAction(rec, roots, "profiles.create", g.Name, false, call("profiles.create")))
	// The guest's home as every other tenant's, then a session and a turn:
	// what the delete then has to remove.
	if err := e.Box.WriteHome(g, tenants.HomeExtras{}); err != nil {
		e.T.Fatalf("write home of %s: %v", name, err)
	}
	c := e.Dial(e.Server, g)
	s := e.CreateSession(c, g)
	e.Prompt(c, g, s.SessionID, noToolsPrompt+"a session for the delete of "+name)
	st.m.Actions = append(st.m.Actions, e.recordAction(rec, roots, "profiles.delete", g.Name, false, call("profiles.delete")))
	st.m.Actions = append(st.m.Actions, e.recordAction(rec, roots, "profiles.create (again)", g.Name, false, call("profiles.create")))
	e.Call(admin, "profiles.delete", map[string]any{"name": name}, nil)
	e.MarkDeleted(g)
}

// recordAction drives one action inside a recorder window and returns its
// record; a failed action is recorded as such and noted in the log.
func (e *Env) recordAction(rec *surface.Recorder, roots func() []int, name, tenant string, tools bool, run func(context.Context) error) surface.Action {
	e.T.Helper()
	if err := rec.Begin(name, tenant, tools, roots); err != nil {
		e.T.Fatalf("surface: %v", err)
	}
	ctx, cancel := e.ctx(e.Times.Turn)
	err := run(ctx)
	cancel()
	if err != nil {
		rec.Fail(err.Error())
		e.T.Logf("surface: %s of %s failed: %v", name, tenant, err)
	}
	ctx, cancel = e.ctx(30 * time.Second)
	defer cancel()
	act, err := rec.End(ctx)
	if err != nil {
		e.T.Fatalf("surface: %v", err)
	}
	return act
}

// noteSurface puts the map into the scenario's report.
func (e *Env) noteSurface(m *surface.Map) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.Report.Surface = m
}

// carriersFound reports every process of a outside every sandbox that
// carried a tenant's variable (the server's own environment included).
func (e *Env) carriersFound(a surface.Action) {
	for _, p := range a.Procs {
		if p.Confined {
			continue
		}
		for _, c := range p.Carries {
			e.Find(invariants.Finding{Invariant: invariants.UnsandboxedEnv, Tenant: c.Tenant,
				Where: invariants.Where{Label: "process " + p.Program + " outside every sandbox"}, Place: "process " + p.Program,
				Detail: fmt.Sprintf("%s (pid %d, %s), started in %s's %s, carries %s's variable %s", p.Program, p.PID, p.How, orAll(a.Tenant), a.Name, c.Tenant, c.Name)})
		}
	}
}

func orAll(t string) string {
	if t == "" {
		return "every tenant"
	}
	return t
}

// surfaceControls are the discovery's positive controls: it saw the
// server read some file of each tenant's home in an action without tools,
// and saw the server's own process; a pass that sees nothing proves
// nothing.
func (e *Env) surfaceControls(m *surface.Map) {
	for _, t := range e.Tenants {
		reads, server := 0, false
		for _, a := range m.Actions {
			if a.Tenant != t.Name {
				continue
			}
			reads += len(a.ServerReads())
			server = server || slices.ContainsFunc(a.Procs, func(p surface.Proc) bool { return p.Server })
		}
		if reads == 0 || !server {
			e.Find(invariants.Finding{Invariant: invariants.Control, Tenant: t.Name, Where: invariants.Where{Label: "surface discovery"},
				Detail: fmt.Sprintf("discovery saw %d read(s) of %s's home by the server and the server's process: %v: it cannot have seen the surface", reads, t.Name, server)})
		}
	}
}

// attackSharedPlaces has every tenant plant its canary wherever its
// sandbox can write outside its home, then every tenant look there: what
// one sandbox sees of another's (a shared temp folder, a parent of the
// workdirs) comes back in a look's result, which the request check reads.
// Each tenant then removes its plants.
func (e *Env) attackSharedPlaces() {
	e.T.Helper()
	st := stateOf(e, surfaceKey)
	plant, look, clean := surface.SharedRows()
	sessions := map[string]string{}
	written := map[string]string{}
	for _, t := range e.Tenants {
		c := st.per[t.Name].conn
		sessions[t.Name] = e.CreateSession(c, t).SessionID
		w := e.mint(t, "shared_plant")
		written[t.Name] = w.Value
		e.Attack(c, t, sessions[t.Name], plant, attack.Canaries{Write: w.Value})
	}
	for _, t := range e.Shuffled(e.Tenants) {
		e.Attack(st.per[t.Name].conn, t, sessions[t.Name], look, attack.Canaries{})
	}
	for _, t := range e.Tenants {
		e.Attack(st.per[t.Name].conn, t, sessions[t.Name], clean, attack.Canaries{Write: written[t.Name]})
	}
	for _, act := range []string{"prompt.submit (tools)"} {
		st.m.AimProcs(act, "shared places")
	}
	e.noteSurface(&st.m)
}
