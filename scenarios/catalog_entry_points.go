package scenarios

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
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
	e.judgeEntryDump(t, "a stdio backend launched on the launch profile, serving "+t.Name, e.lastPluginDump(t, ""))
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
	e.judgeEntryDump(t, "the cron tick, firing "+t.Name+"'s job", e.lastPluginDump(t, ""))
}

// everyEnv is every tenant's .env path, for the probe to try.
func (e *Env) everyEnv() []string {
	var out []string
	for _, u := range e.Tenants {
		out = append(out, filepath.Join(u.Home, ".env"))
	}
	return out
}

// judgeEntryDump judges the probe's dump from an entry point: a plugin in
// the command's own process (a direct child of the harness's, as every
// target command is) or one that read another tenant's home is a finding;
// the control is that it read its own.
func (e *Env) judgeEntryDump(t *tenants.Tenant, where string, d pluginDump) {
	w := invariants.Where{Label: "plugin of " + t.Name + " in " + where}
	if !e.lacks(harness.AbilityWhere, string(invariants.PluginBoundary)) && d.Ppid == os.Getpid() {
		e.Find(invariants.Finding{Invariant: invariants.PluginBoundary, Tenant: t.Name, Where: w, Place: where,
			Detail: fmt.Sprintf("the plugin ran in the command's own process (pid %d, a child of the harness): %s runs tenants' plugins in process", d.Pid, where)})
	}
	if e.lacks(harness.AbilityRead, string(invariants.PluginBoundary)) {
		return
	}
	if own := filepath.Join(t.Home, ".env"); d.Reads[own] != "ok" {
		e.Find(invariants.Finding{Invariant: invariants.Control, Tenant: t.Name, Where: w,
			Detail: fmt.Sprintf("the plugin could not read its own home: %s", d.Reads[own])})
	}
	for _, u := range e.Tenants {
		if p := filepath.Join(u.Home, ".env"); u != t && d.Reads[p] == "ok" {
			e.Find(invariants.Finding{Invariant: invariants.PluginBoundary, Tenant: t.Name, Owner: u.Name, Kind: tenants.ProviderKey, Where: w, Place: where,
				Detail: fmt.Sprintf("the plugin read %s's home (%s)", u.Name, p)})
		}
	}
}
