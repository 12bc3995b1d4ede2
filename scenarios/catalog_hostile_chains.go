package scenarios

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// chainState is what hostile-chains keeps between phases, per run (the
// self-test runs the spec clean and faulty at once).
type chainState struct {
	plugins  string            // why the target cannot load the chains' plugin, "" when it can
	aliases  map[string]string // tenant -> a link to its workdir whose path names no canary
	runs     []*chainRun       // every chain run, in order
	phase    string            // the phase running now
	skipped  []ChainRow        // the rows the target could not run, and why
	outside  map[string]time.Time
	listing  invariants.Listing    // the outside places as the last phase left them
	listed   []invariants.Place    // the places listed in listing
	rowKinds map[tenants.Kind]bool // the kinds of the rows' own write canaries
	held     []*chainRun           // the last restart round's runs: put back again after the next stop
	jobs     map[string]string     // tenant -> the id of its own cron job
	cron     *cronTime             // how long a job takes to run here, measured on first need
}

// cronTime is how long the tenants' own jobs, triggered at once, took to
// run (the longest of those that ran), measured once per run.
type cronTime struct {
	once sync.Once
	took time.Duration // 0: none ran within the wait
}

// chainsKey is what hostile-chains can run of the chains, and its runs.
var chainsKey = &stateKey[chainState]{"hostile-chains"}

// chainRun is one chain as one attacker runs it against one victim.
type chainRun struct {
	ch      attack.Chain
	a, v    *tenants.Tenant
	vars    map[string]string
	planted bool      // every step ran and none was refused
	job     string    // the job id a cron step made or triggered
	since   time.Time // when the last step was taken
	outcome string    // how it ended, for the log
	window  *chainWindow
	took    time.Duration
	phase   string // the phase that ran it
	// kind is the kind of the write canary ({write}) minted for this run
	// alone; stale the tenants whose canaries the attacker's own files
	// held when it began; slate the victim's files as they were then
	// (catalog_multistep_slate.go).
	kind  tenants.Kind
	stale *staleSet
	slate []slateFile
	// kept is the harness's copy of the attacker's own files the chain
	// restores, taken before its steps (so a plant need add no entry to
	// the home); stopped, that the attacker's own shell could not make the
	// plant (its sandbox kept it from it): the row runs again with the
	// next attacker.
	kept    []slateFile
	stopped bool
}

// restarts reports whether ch waits for a restart or a crash of the
// server: those rows run in hostile-restarts, beside hostile-chains (each
// round stops the server its scenario owns, so the two can run at once).
func restarts(ch attack.Chain) bool {
	return ch.Trigger == attack.OnRestart || ch.Trigger == attack.OnCrash
}

// hostileChains is the chains that the server, a cron job, the operator or
// a race acts on while it runs.
func hostileChains() Spec {
	chains := slices.DeleteFunc(attack.Chains(), restarts)
	spec := chainsSpec(chains)
	spec.Purpose = "every tenant chains its own powers: links, settings, operator keys and paths planted in its own space, acted on by the server, the operator or a neighbour"
	return spec
}

// chainsSpec is hostile-chains over chains, a phase per group that has
// any (a test runs a table of its own; hostileRestarts the restart
// group alone).
func chainsSpec(chains []attack.Chain) Spec {
	of := func(c attack.ChainClass) []attack.Chain {
		var out []attack.Chain
		for _, ch := range attack.ChainsOf(chains, c) {
			if !restarts(ch) {
				out = append(out, ch)
			}
		}
		return out
	}
	var restartGroup []attack.Chain
	for _, ch := range chains {
		if restarts(ch) {
			restartGroup = append(restartGroup, ch)
		}
	}
	phases := []Phase{
		{Name: "connect", Run: func(e *Env) {
			e.startHostile(nil)
			st := stateOf(e, chainsKey)
			*st = chainState{plugins: e.Box.Target.AgentdPluginsUnsupported(), outside: map[string]time.Time{},
				rowKinds: map[tenants.Kind]bool{}, jobs: map[string]string{}, cron: &cronTime{}}
			e.plantWorkdirs()
			// Every victim has a job, so a chain that reaches another's jobs
			// shows its cron prompt.
			for _, t := range e.Tenants {
				st.jobs[t.Name] = e.CreateCron(e.Conns[t.Name], t)
			}
			e.outsideControl()
		}},
	}
	for _, g := range []struct {
		phase string
		class attack.ChainClass
	}{{"home-links", attack.HomeLink}, {"settings", attack.Setting}, {"tenant-paths", attack.TenantPath}, {"operator-settings", attack.OperatorSetting}} {
		if group := of(g.class); len(group) > 0 {
			phases = append(phases, chainPhase(g.phase, func(e *Env) { e.watchOutside(func() { e.runChains(group) }) }))
		}
	}
	if len(restartGroup) > 0 {
		phases = append(phases, chainPhase("restart", func(e *Env) { e.watchOutside(func() { e.restartChains(restartGroup) }) }))
	}
	if races := attack.ChainsOf(chains, attack.Race); len(races) > 0 {
		phases = append(phases, chainPhase("races", func(e *Env) {
			for _, ch := range e.chainsOf(races) {
				e.raceChain(ch)
			}
		}))
	}
	phases = append(phases, Phase{Name: "chain-rows", Run: func(e *Env) { e.chainRows() }})
	// It plants files in the workdirs, linked from the sandbox, puts the
	// homes back between rows and lists the folders outside them; a
	// restart round crashes the server and reads its plugin hosts' limits.
	needs := []Need{NeedFiles, NeedServerHost, NeedHomesInPlace}
	if len(restartGroup) > 0 {
		needs = append(needs, NeedRestart)
	}
	return hostileSpec(Spec{
		ID:        "hostile-chains",
		Purpose:   "every tenant chains its own powers: links, settings, operator keys and paths planted in its own space, acted on by the server, a restart, the operator or a neighbour",
		Focus:     []Invariant{Requests, Files, Text, WriteScope, OperatorSecret},
		Snapshots: perTenant(1),
		Timeout:   10 * time.Minute,
		Needs:     needs,
		Phases:    phases,
	})
}

// chainPhase is a phase of hostile-chains: the chain runs it makes are its
// (chainRows gives a row only the findings of its own phase).
func chainPhase(name string, run func(e *Env)) Phase {
	return Phase{Name: name, Run: func(e *Env) {
		stateOf(e, chainsKey).phase = name
		run(e)
	}}
}

// chainPair picks the attacker and victim of the k-th chain of a group:
// attackers in turn (the one its role names, when it names one), the
// victim the next tenant after the attacker.
func (e *Env) chainPair(ch attack.Chain, k int) (a, v *tenants.Tenant) {
	pool := e.chainPool(ch)
	if len(pool) == 0 {
		return nil, nil
	}
	a = pool[k%len(pool)]
	i := slices.Index(e.Tenants, a)
	return a, e.Tenants[(i+1)%len(e.Tenants)]
}

// chainPool is the tenants that may attack with ch, in turn.
func (e *Env) chainPool(ch attack.Chain) []*tenants.Tenant {
	pool := e.attackers()
	switch ch.Role {
	case attack.Launch:
		pool = []*tenants.Tenant{e.Launch()}
	case attack.Named:
		pool = slices.DeleteFunc(slices.Clone(pool), func(t *tenants.Tenant) bool { return t.Launch })
	}
	return pool
}

// newChainRun fills ch's placeholders for attacker a and victim v, or
// returns nil (logging why) when the target cannot run it.
func (e *Env) newChainRun(ch attack.Chain, a, v *tenants.Tenant) *chainRun {
	st := stateOf(e, chainsKey)
	skip := func(why string) *chainRun {
		e.Logf("chain %s skipped: %s", ch.ID, why)
		st.skipped = append(st.skipped, ChainRow{Row: ch.ID, Outcome: "skipped: " + why})
		return nil
	}
	if a == nil || v == nil || a == v {
		return skip(fmt.Sprintf("no attacker and victim for role %q in this run", ch.Role))
	}
	kind := chainRowKind(ch.ID)
	pl := attack.Places{
		Home: a.Home, Victim: v.Home, VictimName: v.Name,
		OwnWorkdir: a.Workdir, VictimWorkdir: st.aliases[v.Name], WorkRoot: e.workRoot(),
		HomesParent:    filepath.Join(e.Box.Set.LaunchHome, e.Box.Set.Layout.WithDefaults().ProfilesDir),
		VictimProvider: v.ProviderURL(), Files: e.Box.Set.Layout.WithDefaults().Files,
	}
	if miss := pl.Missing(ch.Needs); len(miss) > 0 {
		return skip("the target's layout names no " + strings.Join(miss, ", "))
	}
	if st.plugins != "" && usesPlugin(ch) {
		return skip("it installs a plugin, and " + st.plugins)
	}
	// Its own write canary, minted now: no earlier row can have left it.
	pl.Write = e.mint(a, kind).Value
	st.rowKinds[kind] = true
	r := &chainRun{ch: ch, a: a, v: v, vars: pl.Vars(), phase: st.phase, kind: kind}
	st.runs = append(st.runs, r)
	return r
}

func usesPlugin(ch attack.Chain) bool {
	if ch.Probe.Plugin != "" || ch.InstallPlugin || ch.ModelPlugin || ch.VictimPlugin {
		return true
	}
	for _, s := range ch.Steps {
		if s.Plugin != "" || strings.Contains(s.Tool, attack.ChainPlugin) {
			return true
		}
	}
	return false
}

// runChains runs each chain of a group on its own: steps, trigger, probe,
// restore.
func (e *Env) runChains(chains []attack.Chain) {
	e.T.Helper()
	for k, ch := range e.chainsOf(chains) {
		// A plant the attacker's own shell could not make is no attack
		// on the server: the next attacker tries it (each once).
		tries := max(1, len(e.chainPool(ch)))
		for try := 0; try < tries; try++ {
			if e.caught() {
				e.Logf("chains from %s on are not run: this faulty run's fault is caught", ch.ID)
				return
			}
			a, v := e.chainPair(ch, k+try)
			r := e.newChainRun(ch, a, v)
			if r == nil {
				break
			}
			win := e.openWindow(r)
			e.beginRow(r)
			if e.plant(r) {
				e.trigger(r)
				e.probe(r, "")
			}
			e.restore(r)
			e.putSlate(r)
			win.close()
			e.Logf("chain %s by %s against %s in %v: %s", ch.ID, a.Name, v.Name, r.took.Round(time.Millisecond), r.outcome)
			if !r.stopped {
				break
			}
		}
	}
}

// plant runs r's steps as its attacker; false when a step was refused (or
// cannot run here).
func (e *Env) plant(r *chainRun) bool {
	e.T.Helper()
	c, sid := e.Conns[r.a.Name], e.Sessions[r.a.Name].SessionID
	cs := e.hostileCanaries(r.a)
	if r.ch.InstallPlugin {
		e.installPlugin(r.a, filepath.Join(r.a.Home, r.vars["plugins"], attack.ChainPlugin), attack.ChainPluginManifest, attack.ChainPluginSource)
	}
	if r.ch.ModelPlugin {
		e.installPlugin(r.a, filepath.Join(r.a.Home, r.vars["plugins"], attack.ModelPluginDir), attack.ModelPluginManifest, attack.Fill(attack.ModelPluginSource, r.vars))
	}
	if r.ch.VictimPlugin {
		c := e.mint(r.v, ChainPluginCode)
		fill := func(s string) string { return strings.ReplaceAll(s, "{canary}", c.Value) }
		e.installPlugin(r.v, filepath.Join(r.v.Home, r.vars["plugins"], attack.VictimPlugin), fill(attack.VictimPluginManifest), fill(attack.VictimPluginSource))
	}
	r.kept = e.keepOwn(r)
	defer func() { r.since = time.Now() }()
	for i, s := range r.ch.Steps {
		if s.Op == "" {
			at := sid
			if s.NewSession {
				var err error
				if at, err = e.tryCreateSession(c, r.a); err != nil {
					r.outcome = fmt.Sprintf("step %d: session.create refused: %v", i+1, err)
					return false
				}
			}
			res := e.Attack(c, r.a, at, r.ch.ToolRow(i, s, r.vars), cs)
			if why, stopped := attack.Stopped(res); stopped {
				r.stopped = true
				r.outcome = fmt.Sprintf("step %d: %s's own shell could not make the plant: %s", i+1, r.a.Name, why)
				return false
			}
			continue
		}
		res, err := e.chainCall(c, r.a, sid, s, r.vars)
		if err != nil {
			r.outcome = fmt.Sprintf("step %d (%s) refused: %v", i+1, s.Op, err)
			return false
		}
		if s.Op == "cron.trigger" {
			r.job = attack.Fill(fmt.Sprint(s.Params["id"]), r.vars)
		}
		for name, field := range s.Save {
			v, ok := dotted(res, field)
			if !ok {
				e.T.Errorf("chain %s step %d: %s answered no %s: %s", r.ch.ID, i+1, s.Op, field, excerpt(res))
				r.outcome = "a step's answer lacked " + field
				return false
			}
			r.vars[name] = v
			if name == "job_id" {
				r.job = v
			}
		}
	}
	r.planted, r.outcome = true, "every step was taken"
	return true
}

// trigger makes the server act on what r planted (a restart is the
// group's, see restartChains).
func (e *Env) trigger(r *chainRun) {
	e.T.Helper()
	c := e.Conns[r.a.Name]
	switch r.ch.Trigger {
	case attack.OnTurn:
		sid, err := e.tryCreateSession(c, r.a)
		if err != nil {
			r.outcome += "; the next session was refused: " + err.Error()
			return
		}
		if err := e.tryTurn(c, sid, attack.Fill(r.ch.Say, r.vars)); err != nil {
			r.outcome += "; the next turn failed: " + err.Error()
		}
		e.probe(r, sid)
		r.ch.Probe = attack.Step{} // probed
	case attack.OnSession:
		if _, err := e.tryCreateSession(c, r.a); err != nil {
			r.outcome += "; session.create refused: " + err.Error()
		}
	case attack.OnCron:
		e.waitJob(c, r)
	case attack.OnNeighbourTurn:
		if err := e.tryTurn(e.Conns[r.v.Name], e.Sessions[r.v.Name].SessionID, "Run the environment probe for "+r.v.Name+"."); err != nil {
			r.outcome += "; the victim's next turn failed: " + err.Error()
		}
	}
}

// probe runs r's probe in session sid (a new one when sid is empty).
func (e *Env) probe(r *chainRun, sid string) {
	e.T.Helper()
	if !r.ch.HasProbe() {
		return
	}
	c := e.Conns[r.a.Name]
	if sid == "" {
		var err error
		if sid, err = e.tryCreateSession(c, r.a); err != nil {
			r.outcome += "; the probe's session was refused: " + err.Error()
			return
		}
	}
	res := e.Attack(c, r.a, sid, r.ch.ProbeRow(r.vars), e.hostileCanaries(r.a))
	r.outcome += "; probe: " + truncateText(strings.Join(strings.Fields(res), " "), 160)
}

// installPlugin writes a plugin's manifest and source into dir, a plugins
// folder of t's home (a tenant may install plugins in its own home).
func (e *Env) installPlugin(t *tenants.Tenant, dir, manifest, source string) {
	e.T.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		e.T.Fatalf("install plugin %s for %s: %v", filepath.Base(dir), t.Name, err)
	}
	for name, data := range map[string]string{"plugin.yaml": manifest, "plugin.go": source} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			e.T.Fatalf("install plugin %s for %s: %v", filepath.Base(dir), t.Name, err)
		}
	}
	ctx, cancel := e.ctx(e.Times.Call)
	defer cancel()
	if err := e.Box.ReloadPlugins(ctx); err != nil {
		e.T.Fatalf("install plugin %s for %s: %v", filepath.Base(dir), t.Name, err)
	}
}

// ChainPluginCode is the kind of the canary in the victim's plugin of a
// chain (attack.VictimPlugin).
const ChainPluginCode tenants.Kind = "plugin_code"

// restore puts back the home files r's steps replaced and undoes its
// settings, so the next chain starts from the attacker's own home; the
// victim's plugin and the attacker's model-provider plugin go. (The
// victim's files are put back by putSlate.)
func (e *Env) restore(r *chainRun) {
	e.T.Helper()
	if r.ch.VictimPlugin {
		e.removeVictimPlugin(r)
	}
	e.restoreOwn(r)
	e.reopenIfRevoked(r.a)
	c, sid := e.Conns[r.a.Name], e.Sessions[r.a.Name].SessionID
	for _, s := range r.ch.Undo {
		if _, err := e.chainCall(c, r.a, sid, s, r.vars); err != nil {
			e.T.Errorf("chain %s: undo %s: %v", r.ch.ID, s.Op, err)
		}
	}
}

// reopenIfRevoked opens the attacker's main connection and session again
// when its own row closed them: a row that replaced its .env made the
// server revoke the credential the connection opened with (and a server
// may keep it closed once its home is back). A target that serves on
// connections it did not open (stdio) is left as it is.
func (e *Env) reopenIfRevoked(a *tenants.Tenant) {
	e.T.Helper()
	if e.Server == nil || !e.Box.Target.TenantCredentials {
		return
	}
	c, s, reopened := e.stillServing(e.Conns[a.Name], a, "after its row")
	if reopened {
		e.Conns[a.Name], e.Sessions[a.Name] = c, s
	}
}

// stillServing makes a session on c for t; when the server no longer
// serves c (a row or a hostile file revoked t's credential, and a revoked
// connection stays closed), it connects t again and makes the session on
// the new connection. It returns the connection that serves t, the
// session, and whether it is a new connection; why says when it was
// looked at, for the log.
func (e *Env) stillServing(c *harness.Conn, t *tenants.Tenant, why string) (*harness.Conn, harness.SessionInfo, bool) {
	e.T.Helper()
	ctx, cancel := e.ctx(30 * time.Second)
	s, err := c.CreateSession(ctx, profileParam(t))
	cancel()
	if err == nil {
		return c, s, false
	}
	e.Logf("%s's connection no longer serves it %s (%v): it connects again", t.Name, why, err)
	c = e.Dial(e.Server, t)
	return c, e.CreateSession(c, t), true
}

// chainCall makes an RPC step on the attacker's own connection, addressed
// to its own session (settings) or profile (cron). A refusal is returned
// as the error; an operation the target does not support too; any other
// failure fails the scenario.
func (e *Env) chainCall(c *harness.Conn, a *tenants.Tenant, sid string, s attack.Step, vars map[string]string) (json.RawMessage, error) {
	e.T.Helper()
	p := attack.FillParams(s.Params, vars)
	switch s.Op {
	case "config.set", "model.save_key":
		p["session_id"] = sid
	default:
		if name := profileParam(a); name != "" {
			p["profile"] = name
		}
	}
	ctx, cancel := e.ctx(e.Times.Call)
	defer cancel()
	var res json.RawMessage
	err := c.Call(ctx, s.Op, p, &res)
	var u *harness.UnsupportedError
	if err != nil && !isRefusal(err) && !errors.As(err, &u) {
		e.T.Errorf("%s by %s: %v", s.Op, a.Name, err)
	}
	return res, err
}

// tryCreateSession is CreateSession that returns the server's refusal.
func (e *Env) tryCreateSession(c *harness.Conn, t *tenants.Tenant) (string, error) {
	ctx, cancel := e.ctx(e.Times.Call)
	defer cancel()
	s, err := c.CreateSession(ctx, profileParam(t))
	if err != nil {
		return "", err
	}
	e.mu.Lock()
	e.sessions = append(e.sessions, session{tenant: t, info: s})
	e.mu.Unlock()
	return s.SessionID, nil
}

// tryTurn runs a turn and returns its failure: a planted file may break the
// turn, which is itself no leak (its frames and requests are scanned).
func (e *Env) tryTurn(c *harness.Conn, sid, text string) error {
	ctx, cancel := e.ctx(e.Times.Turn)
	defer cancel()
	_, err := c.Turn(ctx, sid, text)
	return err
}

// dotted is the string at a dotted path of a JSON document.
func dotted(raw json.RawMessage, path string) (string, bool) {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return "", false
	}
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		v = m[k]
	}
	s, ok := v.(string)
	return s, ok && s != ""
}
