package scenarios

import (
	"fmt"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// installHostilePlugin puts the target's probe plugin (its hostile tool)
// into every tenant's home under the target's own launcher, and has the
// operator's scope set the probe plugin's host limits (agentd's: a short
// call deadline and a memory limit that the hog row outruns, a host past
// either is killed); those are the operator's to set, never a profile's
// own.
func (e *Env) installHostilePlugin() {
	e.T.Helper()
	pp := e.probePlugin()
	if len(pp.Install.Limits) > 0 {
		set, err := e.Box.MergeManaged(pp.Install.Limits)
		if err != nil {
			e.T.Fatalf("set the plugin hosts' limits in the operator's scope: %v", err)
		}
		if !set && e.Box.Target.Remote() {
			e.Logf("the plugin hosts' limits are the running server's operator's (its managed scope on its host, which remote: does not reach): the hog runs against those")
		}
	}
	ctx, cancel := e.ctx(2 * time.Minute)
	defer cancel()
	for _, t := range e.Tenants {
		if err := e.Box.InstallHostilePlugin(ctx, pp, t, map[string]any{harness.BwrapLauncherVar: ""}); err != nil {
			e.T.Fatalf("install the hostile plugin: %v", err)
		}
	}
}

// pingEach runs a do-nothing plugin call of every tenant but skip, timing
// each; a call that does not complete is counted, with its error.
func (e *Env) pingEach(skip *tenants.Tenant, sessions map[string]string, lat map[string]*invariants.Latencies) {
	e.T.Helper()
	for _, t := range e.Tenants {
		if t == skip {
			continue
		}
		l := lat[t.Name]
		ctx, cancel := e.ctx(2 * time.Minute)
		start := time.Now()
		_, err := e.Conns[t.Name].Turn(ctx, sessions[t.Name], attack.Prompt(e.ping()))
		cancel()
		if err == nil {
			if res, _ := attack.LastResult(t); len(res) < 4 || res[:4] != "pong" {
				err = fmt.Errorf("the ping answered %q", truncateText(res, 200))
			}
		}
		if err != nil && e.Ctx.Err() != nil {
			// The run stopped (its deadline, the test's): no failure of the
			// server's, and no availability finding.
			e.T.Fatalf("ping of %s: the run stopped: %v", t.Name, e.Ctx.Err())
		}
		if err != nil {
			l.Failed++
			if l.FirstErr == "" {
				l.FirstErr = err.Error()
			}
			continue
		}
		l.Loaded = append(l.Loaded, time.Since(start))
	}
}

func hostilePlugin() Spec {
	rows := attack.Plugin()
	return hostileSpec(Spec{
		ID:        "hostile-plugin",
		Purpose:   "every tenant's plugin (host mode) attacks the others through its own code: reads, writes, escaping grandchildren, a hog",
		Focus:     []Invariant{Requests, Files, ProcessEscape, Availability},
		Snapshots: perTenant(2),
		Timeout:   8 * time.Minute,
		Needs:     []Need{NeedFiles, NeedRestart, NeedPlugins, NeedPluginHostile, NeedServerHost}, // it kills plugin hosts
		Phases: []Phase{
			{Name: "install", Run: func(e *Env) { e.startHostile(e.installHostilePlugin) }},
			{Name: "reads", Run: func(e *Env) {
				e.attackAll(e.hostileRows(rows), attack.Read, attack.Write)
				e.nextTurns()
			}},
			{Name: "hog", Run: func(e *Env) {
				// One tenant's plugin holds memory and spins past its deadline;
				// every other tenant's plugin calls still complete, during the
				// hog and after it.
				if e.lacks(harness.AbilityHog, string(invariants.Availability)) {
					return
				}
				hog := e.attackers()[len(e.attackers())-1]
				lat := map[string]*invariants.Latencies{}
				pings := map[string]string{} // a session of its own for the pings, free of the reads' history
				for _, t := range e.Tenants {
					lat[t.Name] = &invariants.Latencies{Tenant: t.Name, Flooder: hog.Name}
					pings[t.Name] = e.CreateSession(e.Conns[t.Name], t).SessionID
				}
				// The pings are timed: no other scenario runs beside them.
				e.Alone(func() { e.hogWindows(e.hostileRows(rows), hog, pings, lat) })
				for _, t := range e.Tenants {
					if t != hog {
						e.CheckAvailability(*lat[t.Name])
					}
				}
			}},
			{Name: "host-death", Run: func(e *Env) {
				// Each attacker's host and what it started are its own: they
				// die (and are waited for) at once.
				e.atOnce(e.attackers(), func(t *tenants.Tenant) {
					c, sid := e.Conns[t.Name], e.Sessions[t.Name].SessionID
					mark := e.spawnIn(c, t, sid, e.hostileRows(rows), "processes of "+t.Name+"'s plugin host")
					if e.noHostToKill() {
						e.killCarriers(invariants.Ended{Canaries: []tenants.Canary{mark}})
						return
					}
					hosts := e.hostsOnServer(t)
					if len(hosts) == 0 {
						e.Find(invariants.Finding{Invariant: invariants.Control, Tenant: t.Name, Where: invariants.Where{Label: "plugin host of " + t.Name},
							Detail: "no plugin host of " + t.Name + " was found to kill: the host-death check was not made"})
						e.killCarriers(invariants.Ended{Canaries: []tenants.Canary{mark}})
						return
					}
					pids := carrierPids(hosts)
					e.killOnHost("kill the plugin hosts of "+t.Name, pids...)
					e.CheckEscapes(invariants.Ended{Event: fmt.Sprintf("the death of %s's plugin host (pid %d)", t.Name, hosts[0].Pid),
						Canaries: []tenants.Canary{mark}})
				})
			}},
			{Name: "server-stop", Run: func(e *Env) { e.stopAndCheck(e.hostileRows(rows)) }},
		},
	})
}

// hogWindows times each neighbour's pings before, during and after hog's
// plugin hogs its host: the baseline, then the loaded window.
func (e *Env) hogWindows(rows []attack.Row, hog *tenants.Tenant, pings map[string]string, lat map[string]*invariants.Latencies) {
	// Baseline: each neighbour's ping alone.
	e.pingEach(hog, pings, lat)
	for _, l := range lat {
		l.Baseline, l.Loaded = l.Loaded, nil
	}
	before := len(hog.Requests())
	done := make(chan error, 1)
	go func() {
		ctx, cancel := e.ctx(3 * time.Minute)
		defer cancel()
		_, err := e.Conns[hog.Name].Turn(ctx, e.Sessions[hog.Name].SessionID, attack.Prompt(attack.Of(rows, attack.Flood)[0].Call(attack.Canaries{})))
		done <- err
	}()
	e.Eventually("the hog's call to reach "+hog.Name+"'s plugin", time.Minute, func() (bool, string) {
		n := len(hog.Requests())
		return n > before, fmt.Sprintf("%d request(s)", n-before)
	})
	e.pingEach(hog, pings, lat)
	select {
	case herr := <-done: // the loaded window closed before its pings did
		done <- herr
		e.Logf("the hog's turn ended before the pings under it did: they were timed partly after the hog")
	default:
	}
	var herr error
	select {
	case herr = <-done:
	case <-e.Ctx.Done():
		e.T.Fatalf("the hog's turn did not end: %v", e.Ctx.Err())
	}
	if herr != nil {
		e.Logf("the hog's own turn: %v", herr)
	}
	e.pingEach(hog, pings, lat)
}
