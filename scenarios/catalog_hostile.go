package scenarios

import (
	"fmt"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// maxAttackers is how many tenants of a run attack in a hostile scenario
// (the first ones, the launch tenant among them); the others are only
// victims, so a run with many tenants stays bounded in time.
const maxAttackers = 3

// attackers are the tenants that attack in a hostile scenario.
func (e *Env) attackers() []*tenants.Tenant {
	var out []*tenants.Tenant
	for _, t := range e.Tenants {
		if len(out) < maxAttackers && e.Sessions[t.Name].SessionID != "" {
			out = append(out, t)
		}
	}
	return out
}

// hostileState is what a hostile scenario keeps between phases: each
// tenant's write canary. It lives in each run's Env: the self-test runs
// the same spec clean and faulty at once.
type hostileState struct {
	mu     sync.Mutex // the attackers attack at once
	writes map[string]tenants.Canary
}

func (st *hostileState) canaries(e *Env, t *tenants.Tenant) attack.Canaries {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.writes == nil {
		st.writes = map[string]tenants.Canary{}
	}
	w, ok := st.writes[t.Name]
	if !ok {
		w = e.mint(t, HostileWrite)
		st.writes[t.Name] = w
	}
	return attack.Canaries{Write: w.Value}
}

// nextTurns runs one probe turn of every tenant in a new session, all at
// once: what the others wrote into its home (SOUL.md, .env, memory)
// reaches its provider then, in the system prompt or the shell's
// environment.
func (e *Env) nextTurns() {
	e.T.Helper()
	e.atOnce(e.Tenants, func(t *tenants.Tenant) {
		c := e.Conns[t.Name]
		s := e.CreateSession(c, t)
		e.Turn(c, t, s.SessionID)
	})
}

// spawnIn runs every spawn row of rows as t in session sid on c with a
// fresh mark, proves the marked processes are seen, and returns the mark.
func (e *Env) spawnIn(c *harness.Conn, t *tenants.Tenant, sid string, rows []attack.Row, what string) tenants.Canary {
	e.T.Helper()
	mark := e.mint(t, EscapeMark)
	for _, r := range attack.Of(rows, attack.Spawn) {
		e.Attack(c, t, sid, r, attack.Canaries{Mark: mark.Value})
	}
	e.SeeMarked(t, mark, what)
	return mark
}

// startHostile opens a hostile run: fresh attack state, install (when
// given) before the server starts, a connection and a session per tenant
// (opened at once: a session may start the tenant's plugin host), one
// ordinary turn each.
func (e *Env) startHostile(install func()) {
	e.T.Helper()
	e.hostile = &hostileState{}
	if install != nil {
		install()
	}
	e.ServePerTenant()
	e.openSessionsAtOnce()
	e.InterleavedTurns(1)
}

// openSessionsAtOnce is OpenSessions with every tenant's session.create at
// once.
func (e *Env) openSessionsAtOnce() {
	e.T.Helper()
	var mu sync.Mutex
	sessions := map[string]harness.SessionInfo{}
	e.atOnce(e.Tenants, func(t *tenants.Tenant) {
		s := e.CreateSession(e.Conns[t.Name], t)
		if got := s.Info.ProfileName; got != "" && got != t.Name {
			e.T.Errorf("session of %s reports profile %q", t.Name, got)
		}
		mu.Lock()
		sessions[t.Name] = s
		mu.Unlock()
	})
	e.Sessions = sessions
}

// attackAll has every attacker run, in its main session, the rows of each
// kind in turn; the attackers attack at once (each on its own connection,
// with its own canaries).
func (e *Env) attackAll(rows []attack.Row, kinds ...attack.Class) {
	e.T.Helper()
	if e.faulty.waitsForEscape() {
		e.Logf("the attack rows are not run: this faulty run waits for a process escape, which no row's result shows")
		return
	}
	e.atOnce(e.attackers(), func(t *tenants.Tenant) {
		for _, k := range kinds {
			for _, r := range attack.Of(rows, k) {
				if e.caughtBy(t) {
					e.Logf("%s's rows after its first hit are not run: this faulty run's fault is caught", t.Name)
					return
				}
				e.Attack(e.Conns[t.Name], t, e.Sessions[t.Name].SessionID, r, e.hostile.canaries(e, t))
			}
		}
	})
}

// stopAndCheck spawns in every attacker's main session (all at once),
// stops the server, and checks that nothing carrying any tenant's canary
// is left.
func (e *Env) stopAndCheck(rows []attack.Row) {
	e.T.Helper()
	e.atOnce(e.attackers(), func(t *tenants.Tenant) {
		e.spawnIn(e.Conns[t.Name], t, e.Sessions[t.Name].SessionID, rows, "processes of "+t.Name+" before the server stops")
	})
	e.StopServe(e.Server)
	e.CheckEscapes(invariants.Ended{Event: "the server's stop", Canaries: everyCanary(e.Box.Set.Tenants)})
}

func hostileTools() Spec {
	rows := attack.Terminal()
	return Spec{
		ID:        "hostile-tools",
		Purpose:   "every tenant's model attacks the others through its terminal: reads, writes, escaping processes, floods",
		Backends:  []harness.Backend{harness.BackendServe},
		Focus:     []Invariant{Requests, EnvSnapshots, Files, ProcessEscape},
		Snapshots: perTenant(2),
		Timeout:   8 * time.Minute,
		Needs:     []Need{NeedFiles, NeedRestart},
		Responder: attack.Responder,
		Phases: []Phase{
			{Name: "connect", Run: func(e *Env) { e.startHostile(nil) }},
			{Name: "reads", Run: func(e *Env) { e.attackAll(rows, attack.Read, attack.Flood) }},
			{Name: "writes", Run: func(e *Env) {
				e.attackAll(rows, attack.Write)
				e.nextTurns()
			}},
			{Name: "session-close", Run: func(e *Env) {
				// Each attacker's session, processes and mark are its own:
				// they close (and are waited for) at once.
				e.atOnce(e.attackers(), func(t *tenants.Tenant) {
					c := e.Conns[t.Name]
					s := e.CreateSession(c, t)
					mark := e.spawnIn(c, t, s.SessionID, rows, "processes of session "+s.SessionID+" of "+t.Name)
					e.CloseSession(c, s.SessionID)
					e.CheckEscapes(invariants.Ended{Event: fmt.Sprintf("the close of session %s of %s", s.SessionID, t.Name),
						Canaries: []tenants.Canary{mark}})
				})
			}},
			{Name: "profile-delete", Run: func(e *Env) {
				name := "hostile-" + lifecycleName(e)
				g, err := e.Box.Set.AddTenant(name)
				if err != nil {
					e.T.Fatalf("%v", err)
				}
				e.Tenants = e.Box.Set.Tenants
				admin := e.DialOperator(e.Server)
				e.Call(admin, "profiles.create", map[string]any{"name": name}, nil)
				// Through the sandbox, so the new home gets the dialect's config
				// as every other home did.
				if err := e.Box.WriteHome(g, tenants.HomeExtras{}); err != nil {
					e.T.Fatalf("write home of %s: %v", name, err)
				}
				c := e.Dial(e.Server, g)
				s := e.CreateSession(c, g)
				e.Turn(c, g, s.SessionID)
				e.spawnIn(c, g, s.SessionID, rows, "processes of profile "+name)
				e.Call(admin, "profiles.delete", map[string]any{"name": name}, nil)
				e.MarkDeleted(g)
				e.CheckEscapes(invariants.Ended{Event: "the deletion of profile " + name, Canaries: g.Canaries()})
			}},
			{Name: "server-stop", Run: func(e *Env) { e.stopAndCheck(rows) }},
		},
	}
}

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
		if _, err := e.Box.MergeManaged(pp.Install.Limits); err != nil {
			e.T.Fatalf("set the plugin hosts' limits in the operator's scope: %v", err)
		}
	}
	ctx, cancel := e.ctx(2 * time.Minute)
	defer cancel()
	for _, t := range e.Tenants {
		if err := e.Box.InstallProbePlugin(ctx, pp, t, map[string]any{harness.BwrapLauncherVar: ""}); err != nil {
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
	return Spec{
		ID:        "hostile-plugin",
		Purpose:   "every tenant's plugin (host mode) attacks the others through its own code: reads, writes, escaping grandchildren, a hog",
		Backends:  []harness.Backend{harness.BackendServe},
		Focus:     []Invariant{Requests, Files, ProcessEscape, Availability},
		Snapshots: perTenant(2),
		Timeout:   8 * time.Minute,
		Needs:     []Need{NeedFiles, NeedRestart, NeedPlugins, NeedPluginHostile},
		Responder: attack.Responder,
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
					hosts := pluginHostsOf(e, t)
					if len(hosts) == 0 {
						e.Find(invariants.Finding{Invariant: invariants.Control, Tenant: t.Name, Where: invariants.Where{Label: "plugin host of " + t.Name},
							Detail: "no plugin host of " + t.Name + " was found to kill: the host-death check was not made"})
						e.killCarriers(invariants.Ended{Canaries: []tenants.Canary{mark}})
						return
					}
					for _, h := range hosts {
						killPid(h.Pid)
					}
					e.CheckEscapes(invariants.Ended{Event: fmt.Sprintf("the death of %s's plugin host (pid %d)", t.Name, hosts[0].Pid),
						Canaries: []tenants.Canary{mark}})
				})
			}},
			{Name: "server-stop", Run: func(e *Env) { e.stopAndCheck(e.hostileRows(rows)) }},
		},
	}
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
