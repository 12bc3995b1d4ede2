package scenarios

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/harness/surface"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// surfaceDir is the folder of a tenant's home the surface attacks write
// their payloads and reports into: the tenant's own place.
const surfaceDir = ".surface"

// attackSurfaceEnv sets, in each tenant's own .env, every variable that
// changes what a program inheriting it runs (surface.WritePayloads), then
// replays the actions that start processes (a new session and a turn with
// tools, and the cron tick). A payload that ran outside every sandbox is a
// finding; what it read of the next tenant's .env lands in the attacker's
// home, where the file check finds it. The ran-control: some payload ran
// somewhere (the tenant's own sandbox, at least), or the check is skipped
// with the reason.
func (e *Env) attackSurfaceEnv() {
	e.T.Helper()
	st := stateOf(e, surfaceKey)
	envName := e.Box.Target.Layout.Files.Env
	if envName == "" {
		e.skip(string(invariants.UnsandboxedEnv), "the target's layout names no .env file: no tenant variable to set")
		return
	}
	programs := unconfinedPrograms(&st.m)
	mnt, user, err := surface.ServerNamespaces(e.Server.Pid())
	if err != nil {
		e.T.Fatalf("surface: the server's namespaces: %v", err)
	}
	ran := 0
	for i, a := range e.Tenants {
		v := e.Tenants[(i+1)%len(e.Tenants)]
		ctx, cancel := e.ctx(2 * time.Minute)
		set, err := surface.WritePayloads(ctx, filepath.Join(a.Home, surfaceDir, "env"), filepath.Join(v.Home, envName), programs)
		cancel()
		if err != nil {
			e.T.Fatalf("surface: payloads of %s: %v", a.Name, err)
		}
		for _, s := range set.Skipped {
			e.skipRow(string(invariants.UnsandboxedEnv), "payload not made: "+s)
		}
		restore := e.appendEnv(a, envName, append(set.Vars, serverRefs(e.Box.Target.TokenVar)...))
		e.replayWithEnv(st, a)
		if err := restore(); err != nil {
			e.T.Fatalf("surface: put %s's .env back: %v", a.Name, err)
		}
		for _, p := range set.Vars {
			for _, act := range []string{"session.create", "prompt.submit (tools)", "cron tick"} {
				st.m.AimProcs(act, "env "+p.Var)
			}
		}
		reps, err := surface.ReadReports(set.Reports)
		if err != nil {
			e.T.Fatalf("surface: reports of %s: %v", a.Name, err)
		}
		ran += len(reps)
		for _, r := range reps {
			if !r.Outside(mnt, user) {
				continue
			}
			f := invariants.Finding{Invariant: invariants.UnsandboxedEnv, Tenant: a.Name,
				Where: invariants.Where{Label: "payload " + r.Var + " outside every sandbox"}, Place: "payload " + r.Var,
				Detail: fmt.Sprintf("%s from %s's own .env ran its payload in pid %d, in the server's mount and user namespaces without no_new_privs", r.Var, a.Name, r.PID)}
			if len(strings.TrimSpace(string(r.Victim))) > 0 {
				f.Owner, f.Kind = v.Name, tenants.ProviderKey
				f.Detail += fmt.Sprintf(", and read %s's %s", v.Name, envName)
				f.Excerpt = excerpt(r.Victim)
			}
			e.Find(f)
		}
	}
	if ran == 0 {
		e.skipRow(string(invariants.UnsandboxedEnv), "no environment payload ran anywhere, not even in the tenants' own sandboxes: the target passes no .env variable to any process the harness could see")
	}
	e.noteSurface(&st.m)
}

// serverRefs are .env lines that name the server's own variables (its
// operator token's): a server that expands references in a tenant's .env
// hands the tenant its own environment, and the tenant's snapshot then
// carries the operator's secret (the operator-secret check reads it).
func serverRefs(tokenVar string) []surface.Payload {
	if tokenVar == "" {
		return nil
	}
	return []surface.Payload{{Var: "SURFACE_REF_BRACED", Value: "${" + tokenVar + "}"}, {Var: "SURFACE_REF_PLAIN", Value: "$" + tokenVar},
		{Var: "SURFACE_REF_DEFAULT", Value: "${" + tokenVar + ":-unset}"}}
}

// unconfinedPrograms are the programs the map saw outside every sandbox:
// the PATH payload shims them.
func unconfinedPrograms(m *surface.Map) []string {
	var out []string
	for _, a := range m.Actions {
		for _, p := range a.Unconfined() {
			if !slices.Contains(out, p.Program) {
				out = append(out, p.Program)
			}
		}
	}
	return out
}

// appendEnv adds vars to t's .env and returns the function that writes the
// file back as it was.
func (e *Env) appendEnv(t *tenants.Tenant, envName string, vars []surface.Payload) func() error {
	e.T.Helper()
	p := filepath.Join(t.Home, envName)
	old, err := os.ReadFile(p)
	if err != nil {
		e.T.Fatalf("surface: read %s's %s: %v", t.Name, envName, err)
	}
	var b strings.Builder
	b.Write(old)
	if len(old) > 0 && old[len(old)-1] != '\n' {
		b.WriteByte('\n')
	}
	for _, v := range vars {
		fmt.Fprintf(&b, "%s=%s\n", v.Var, v.Value)
	}
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		e.T.Fatalf("surface: write %s's %s: %v", t.Name, envName, err)
	}
	e.pushHomes("surface: write " + t.Name + "'s " + envName)
	return func() error {
		if err := os.WriteFile(p, old, 0o600); err != nil {
			return err
		}
		ctx, cancel := e.ctx(e.Times.Call)
		defer cancel()
		return e.Box.PushHomes(ctx)
	}
}

// replayWithEnv replays the actions that start processes for t: a new
// session and a turn with tools (a new shell, so a new sandbox launch), a
// cron job run (a server may load a profile's .env again for each job),
// the cron tick where the target has one, and a restart of the server
// (one may load every .env at its start). A failed action is logged: what
// it started before failing is judged all the same.
func (e *Env) replayWithEnv(st *surfaceState, t *tenants.Tenant) {
	e.T.Helper()
	per := st.per[t.Name]
	for _, name := range []string{"session.create", "prompt.submit (tools)"} {
		a, _ := surfaceActionNamed(name)
		ctx, cancel := e.ctx(e.Times.Turn)
		if err := a.run(ctx, e, per, t); err != nil {
			e.T.Logf("surface: %s of %s with the payloads set: %v", name, t.Name, err)
		}
		cancel()
	}
	e.replayCronJob(per, t)
	if len(e.Box.Target.CronTick) > 0 {
		ctx, cancel := e.ctx(e.Times.Turn)
		if _, err := e.Box.RunCronTick(ctx); err != nil {
			e.T.Logf("surface: cron tick with %s's payloads set: %v", t.Name, err)
		}
		cancel()
	}
	if e.Box.Target.CanRestart() {
		e.StopServe(e.Server)
		e.StartServe()
		// Every tenant connects again, each with a session (its own model in
		// its own frames, the connection's control); t's is the one the
		// restart with the payloads set serves.
		for _, u := range e.Tenants {
			c := e.Dial(e.Server, u)
			s := e.CreateSession(c, u)
			st.per[u.Name].conn, st.per[u.Name].sid, st.per[u.Name].stored = c, s.SessionID, s.StoredSessionID
		}
	}
}

// replayCronJob makes a job of t's due now and waits (bounded) for a run
// of it: where cron is unsupported, nothing.
func (e *Env) replayCronJob(per *surfaceTenant, t *tenants.Tenant) {
	e.T.Helper()
	a, _ := surfaceActionNamed("cron")
	ctx, cancel := e.ctx(e.Times.Turn)
	defer cancel()
	since := time.Now()
	if err := a.run(ctx, e, per, t); err != nil || per.cron == "" {
		if err != nil {
			e.T.Logf("surface: cron job of %s with the payloads set: %v", t.Name, err)
		}
		return
	}
	wctx, wcancel := e.ctx(30 * time.Second)
	defer wcancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if jobs, err := e.listCron(per.conn, t); err == nil {
			for _, j := range jobs {
				if j.ID == per.cron && j.ranSince(since) {
					return
				}
			}
		}
		select {
		case <-wctx.Done():
			e.T.Logf("surface: %s's cron job did not run within 30 s with the payloads set", t.Name)
			return
		case <-tick.C:
		}
	}
}
