package scenarios

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// entryPoints drives every entry point the target file declares with a
// tenant's plugin, beyond the pooled server: a stdio backend launched on
// one profile that then serves another, and the one-shot cron tick that
// serves every profile. Either is a pooled server in all but name: a
// tenant's plugin must run in a host of its own profile there too, never
// in the command's process, and read no other home.
func entryPoints() Spec {
	return Spec{
		ID:         "entry-points",
		Purpose:    "a stdio backend launched on one profile serves another tenant's session, and the cron tick fires a tenant's job, each calling that tenant's plugin: the plugin runs in a host of its own profile, never in the command's own process, and reads no other home",
		Backends:   []harness.Backend{harness.BackendStdio},
		Focus:      []Invariant{invariants.PluginBoundary},
		Snapshots:  perTenant(0),
		MinTenants: 2,
		Timeout:    4 * time.Minute,
		Needs:      []Need{NeedFiles, NeedPlugins},
		Responder:  pluginResponder,
		Phases: []Phase{
			{Name: "install", Run: func(e *Env) {
				st := stateOf(e, entryPointsState)
				e.installProbePlugin(st)
			}},
			{Name: "stdio-serves-another", Run: func(e *Env) { e.stdioServesAnother() }},
			{Name: "cron-tick", Run: func(e *Env) { e.cronTickPlugin() }},
		},
	}
}

var entryPointsState = &stateKey[pluginState]{"entry-points"}

// entryTenant is the tenant an entry point serves that it was not launched
// on: the first that is not the launch tenant.
func (e *Env) entryTenant() *tenants.Tenant {
	for _, t := range e.Tenants {
		if !t.Launch {
			return t
		}
	}
	e.T.Fatalf("entry points: every tenant is the launch tenant")
	return nil
}

// stdioServesAnother launches a stdio backend on the launch profile and
// has it serve another tenant's session with a plugin call.
func (e *Env) stdioServesAnother() {
	e.T.Helper()
	t := e.entryTenant()
	c := e.StartStdio(t) // launched on the launch profile, as every stdio backend is
	s := e.CreateSession(c, t)
	args, _ := json.Marshal(pluginArgs{Tag: e.mint(t, "session_tag").Value, Read: e.everyEnv()})
	e.Prompt(c, t, s.SessionID, pluginPrompt+e.probePlugin().Tools.Probe+" "+string(args))
	e.judgeEntryDump(t, "a stdio backend launched on the launch profile, serving "+t.Name, e.lastPluginDump(t, ""), true)
}

// cronTickPlugin makes a cron job of another tenant's whose prompt calls
// its plugin, marks it due over a stdio backend (no ticker of its own),
// stops that backend, and runs the cron tick, which fires it.
func (e *Env) cronTickPlugin() {
	e.T.Helper()
	if len(e.Box.Target.CronTick) == 0 {
		e.skipRow(string(invariants.PluginBoundary), "the target declares no cron_tick: the one-shot tick was not driven")
		return
	}
	if why := e.Box.Target.Dialect.Unsupported("cron.create"); why != "" {
		e.skipRow(string(invariants.PluginBoundary), "cron.create is unsupported: the cron tick's plugins were not driven: "+why)
		return
	}
	t := e.entryTenant()
	c := e.StartStdio(t)
	args, _ := json.Marshal(pluginArgs{Tag: e.mint(t, "session_tag").Value, Read: e.everyEnv()})
	var res struct {
		Job cronJob `json:"job"`
	}
	e.Call(c, "cron.create", map[string]any{"profile": profileParam(t), "name": "entry-" + t.Name,
		"prompt": pluginPrompt + e.probePlugin().Tools.Probe + " " + string(args), "every": "every 1h"}, &res)
	if res.Job.ID == "" {
		e.T.Fatalf("cron.create for %s returned no job id", t.Name)
	}
	e.Call(c, "cron.trigger", map[string]any{"profile": profileParam(t), "id": res.Job.ID}, nil)
	before := len(t.Requests())
	c.Close()
	e.CronTick()
	if len(t.Requests()) == before {
		// The stdio backend may have fired it itself on its way out: the
		// tick found nothing due, and the plugin it ran is judged all the
		// same below.
		e.T.Logf("entry points: the cron tick sent no request of %s's", t.Name)
	}
	e.judgeEntryDump(t, "the cron tick, firing "+t.Name+"'s job", e.lastPluginDump(t, ""), false)
}

// everyEnv is every tenant's .env path, for the probe to try: where the
// plugin runs (on a running server's host, the path there).
func (e *Env) everyEnv() []string {
	var out []string
	for _, u := range e.Tenants {
		out = append(out, e.envPath(u))
	}
	return out
}

// envPath is u's .env as the target's processes see it.
func (e *Env) envPath(u *tenants.Tenant) string {
	return e.Box.RemotePath(filepath.Join(u.Home, ".env"))
}

// judgeEntryDump judges the probe's dump from an entry point: a plugin in
// the command's own process or one that read another tenant's home is a
// finding; the control is that it read its own. live says the command
// still runs (a stdio backend; the cron tick has ended).
func (e *Env) judgeEntryDump(t *tenants.Tenant, where string, d pluginDump, live bool) {
	w := invariants.Where{Label: "plugin of " + t.Name + " in " + where}
	if !e.lacks(harness.AbilityWhere, string(invariants.PluginBoundary)) {
		switch in, why := e.inCommandProcess(d, live); {
		case why != "":
			e.skipRow(string(invariants.PluginBoundary), where+": whether the plugin ran in the command's own process was not judged: "+why)
		case in:
			e.Find(invariants.Finding{Invariant: invariants.PluginBoundary, Tenant: t.Name, Where: w, Place: where,
				Detail: fmt.Sprintf("the plugin ran in the command's own process (pid %d, ppid %d): %s runs tenants' plugins in process", d.Pid, d.Ppid, where)})
		}
	}
	if e.lacks(harness.AbilityRead, string(invariants.PluginBoundary)) {
		return
	}
	if own := e.envPath(t); d.Reads[own] != "ok" {
		e.Find(invariants.Finding{Invariant: invariants.Control, Tenant: t.Name, Where: w,
			Detail: fmt.Sprintf("the plugin could not read its own home: %s", d.Reads[own])})
	}
	for _, u := range e.Tenants {
		if p := e.envPath(u); u != t && d.Reads[p] == "ok" {
			e.Find(invariants.Finding{Invariant: invariants.PluginBoundary, Tenant: t.Name, Owner: u.Name, Kind: tenants.ProviderKey, Where: w, Place: where,
				Detail: fmt.Sprintf("the plugin read %s's home (%s)", u.Name, p)})
		}
	}
}

// inCommandProcess reports whether the plugin that made d ran in the
// entry point's own process, or why that cannot be told. Beside the
// harness, that process is a direct child of the harness's. On a running
// server's host, it is a process the harness's command started there: it
// carries the run's marker ({env}) and its parent, the transport's shell,
// does not; a plugin host in a PID namespace of its own reports other
// numbers. Only a live command is listed there.
func (e *Env) inCommandProcess(d pluginDump, live bool) (bool, string) {
	if !e.Box.Target.RemoteFiles() {
		return d.Ppid == os.Getpid(), ""
	}
	if !live {
		return false, "the command has ended on the server's host, where its process would have been listed"
	}
	if why := e.seesProcesses(); why != "" {
		return false, why
	}
	ctx, cancel := e.ctx(e.Times.Call)
	defer cancel()
	ps, err := e.Box.RemoteProcesses(ctx)
	if err != nil {
		e.Find(invariants.Finding{Invariant: invariants.Harness, Detail: err.Error()})
		return false, ""
	}
	mark := procgroup.MarkerVar + "=" + e.Box.RunID
	marked := map[int]bool{}
	for _, p := range ps {
		if slices.Contains(p.Env, mark) {
			marked[p.Pid] = true
		}
	}
	roots := 0
	for _, p := range ps {
		if !marked[p.Pid] || marked[p.PPid] {
			continue
		}
		roots++
		if p.Pid == d.Pid && p.PPid == d.Ppid {
			return true, ""
		}
	}
	if roots == 0 {
		return false, "no process of the server's host carries the run's marker (the stdio command passes no {env})"
	}
	return false, ""
}
