package scenarios

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// hostileRestarts is the chains that wait for the server's restart or
// crash: what a tenant planted in its own home, read at the next start.
func hostileRestarts() Spec {
	var chains []attack.Chain
	for _, ch := range attack.Chains() {
		if restarts(ch) {
			chains = append(chains, ch)
		}
	}
	spec := chainsSpec(chains)
	spec.ID = "hostile-restarts"
	spec.Purpose = "every tenant plants links and settings in its own home and waits for the server to restart or crash and start again: what the server then opens, stores and launches stays its own"
	return spec
}

// restartRound is the chains that share one restart (or crash) of the
// server: each tenant attacks in one of them at most, and no two touch
// one file of one tenant, so neither a plant nor a restore of one can
// hide or break another's effect, and a profile that a defended server
// refuses to open (over a plant it judges) costs one row only.
type restartRound struct {
	crash bool
	runs  []*chainRun
	used  map[string]bool // "<tenant>/<file>" touched, "<tenant>" attacking
}

// restartRounds places the chains whose trigger is a restart or a crash in
// rounds, in order, each in the first round it fits (its attacker and
// victim taken in turn, as chainPair does, until a pair fits). An attacker
// stoppedBy names for a chain (its own shell could not plant it) is not
// its attacker again.
func (e *Env) restartRounds(chains []attack.Chain, stoppedBy map[string]map[string]bool) []*restartRound {
	var rounds []*restartRound
	pool := e.attackers()
	for k, ch := range chains {
		crash := ch.Trigger == attack.OnCrash
		own, victim := ch.Touches()
		fits := func(rd *restartRound, a, v *tenants.Tenant) bool {
			if rd.crash != crash || rd.used[a.Name] || stoppedBy[ch.ID][a.Name] {
				return false
			}
			for _, f := range own {
				if rd.used[a.Name+"/"+f] {
					return false
				}
			}
			for _, f := range victim {
				if rd.used[v.Name+"/"+f] {
					return false
				}
			}
			return true
		}
		var placed *restartRound
		var a, v *tenants.Tenant
		for _, rd := range append(rounds, &restartRound{crash: crash, used: map[string]bool{}}) {
			for off := 0; off < max(1, len(pool)) && placed == nil; off++ {
				if ca, cv := e.chainPair(ch, k+off); ca != nil && cv != nil && fits(rd, ca, cv) {
					placed, a, v = rd, ca, cv
				}
			}
			if placed != nil {
				break
			}
		}
		if placed == nil {
			if len(stoppedBy[ch.ID]) > 0 {
				continue // every attacker left was tried
			}
			a, v = e.chainPair(ch, k) // no pair fits even alone: newChainRun says why
			placed = &restartRound{crash: crash, used: map[string]bool{}}
		}
		r := e.newChainRun(ch, a, v)
		if r == nil {
			continue
		}
		if !contains(rounds, placed) {
			rounds = append(rounds, placed)
		}
		placed.runs = append(placed.runs, r)
		placed.used[a.Name] = true
		for _, f := range own {
			placed.used[a.Name+"/"+f] = true
		}
		for _, f := range victim {
			placed.used[v.Name+"/"+f] = true
		}
	}
	return rounds
}

func contains(rounds []*restartRound, rd *restartRound) bool {
	for _, x := range rounds {
		if x == rd {
			return true
		}
	}
	return false
}

// restartChains runs the chains whose trigger is a restart or a crash,
// round by round (restartRounds).
// A plant the attacker's own shell could not make is no attack on the
// server: once the rounds are done, such chains are placed again, in
// rounds of their own, with attackers not tried yet.
func (e *Env) restartChains(chains []attack.Chain) {
	e.T.Helper()
	stoppedBy := map[string]map[string]bool{}
	n := 0
	for todo := e.chainsOf(chains); len(todo) > 0; {
		var again []attack.Chain
		for _, rd := range e.restartRounds(todo, stoppedBy) {
			if n++; n > 1 {
				e.yield() // rounds stand alone: a phase that runs alone goes in between, not after them all
			}
			var ids []string
			for _, r := range rd.runs {
				ids = append(ids, r.ch.ID)
			}
			how := "restart"
			if rd.crash {
				how = "crash"
			}
			e.Logf("restart round %d (%s): %s", n, how, strings.Join(ids, ", "))
			e.restartRound(rd)
			for _, r := range rd.runs {
				if !r.stopped {
					continue
				}
				if stoppedBy[r.ch.ID] == nil {
					stoppedBy[r.ch.ID] = map[string]bool{}
				}
				stoppedBy[r.ch.ID][r.a.Name] = true
				again = append(again, r.ch)
			}
		}
		todo = again
	}
}

// restartRound plants every chain of rd, restarts the server once (kills
// it, for a crash round), then runs each one's turn and probe, and every
// victim's next turn, and restores them all.
func (e *Env) restartRound(rd *restartRound) {
	e.T.Helper()
	win := e.openWindow(rd.runs...)
	began := time.Now()
	var lap []string
	took := func(what string) {
		lap = append(lap, fmt.Sprintf("%s %v", what, time.Since(began).Round(time.Millisecond)))
		began = time.Now()
	}
	defer func() { e.Logf("restart round: %s", strings.Join(lap, ", ")) }()
	var runs []*chainRun
	for _, r := range rd.runs {
		if e.plant(r) {
			runs = append(runs, r)
		}
	}
	took("planted in")
	if len(runs) > 0 {
		t0 := time.Now()
		if rd.crash {
			e.CrashServe(e.Server)
		} else {
			e.StopServe(e.Server)
		}
		t1 := time.Now()
		win.serverDown()
		// With the server down, nothing holds a victim's file of the last
		// round open any more: what it wrote there since is that round's,
		// and the file is put back again. What this round's rows start from
		// is noted now, with their plants in place and the server not yet
		// acting on them.
		for _, r := range stateOf(e, chainsKey).held {
			e.putSlate(r)
		}
		for _, r := range rd.runs {
			e.beginRow(r)
		}
		e.ServePerTenant()
		e.Logf("the server stopped in %v and started in %v", t1.Sub(t0).Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
		// A planted file may keep a profile from opening (a defended server
		// refuses a home file that links out): its main session is then none.
		e.Sessions = map[string]harness.SessionInfo{}
		var mu sync.Mutex
		e.allAtOnce(func(t *tenants.Tenant) error {
			sid, err := e.tryCreateSession(e.Conns[t.Name], t)
			if err != nil {
				e.Logf("after the restart, %s opens no session: %v", t.Name, err)
				return err
			}
			mu.Lock()
			e.Sessions[t.Name] = harness.SessionInfo{SessionID: sid}
			mu.Unlock()
			return nil
		})
		took("restarted, sessions opened in")
		// Each row of a round has an attacker of its own: their turns, then
		// the victims' next turns, run side by side.
		e.sideBySide(runs, func(r *chainRun) {
			c := e.Conns[r.a.Name]
			sid, err := e.tryCreateSession(c, r.a)
			if err != nil {
				r.outcome = "refused after the restart: " + err.Error()
				return
			}
			r.outcome = "the server took it after the restart"
			if err := e.tryTurn(c, sid, attack.Fill(r.ch.Say, r.vars)); err != nil {
				r.outcome += "; its turn failed: " + err.Error()
			}
			e.probe(r, sid)
			if r.ch.HostLimit != nil {
				e.checkHostLimit(r)
			}
		})
		// The neighbours' next turns: what the attackers planted in their
		// homes reaches their providers.
		var victims []*chainRun
		seen := map[string]bool{}
		for _, r := range runs {
			if sid := e.Sessions[r.v.Name].SessionID; !seen[r.v.Name] && sid != "" {
				seen[r.v.Name] = true
				victims = append(victims, r)
			}
		}
		e.sideBySide(victims, func(r *chainRun) {
			if err := e.tryTurn(e.Conns[r.v.Name], e.Sessions[r.v.Name].SessionID, "Run the environment probe for "+r.v.Name+"."); err != nil {
				e.Logf("the next turn of %s after the restart: %v", r.v.Name, err)
			}
		})
		took("turns and probes in")
	}
	for _, r := range rd.runs {
		e.restore(r)
		e.putSlate(r)
	}
	stateOf(e, chainsKey).held = runs
	win.close()
	took("restored in")
	for _, r := range rd.runs {
		e.Logf("chain %s by %s against %s: %s", r.ch.ID, r.a.Name, r.v.Name, r.outcome)
	}
	// With the planted files gone, a profile the server refused opens
	// again: its connection shows its own session (the connection's
	// positive control), and the rounds and phases after this one have it.
	for _, t := range e.Tenants {
		if e.Sessions[t.Name].SessionID == "" {
			e.Sessions[t.Name] = e.CreateSession(e.Conns[t.Name], t)
		}
	}
	took("refused profiles opened again in")
}

// sideBySide runs do for every run at once and waits for them all (a
// Fatalf in one ends that one: its deferred Done still runs).
func (e *Env) sideBySide(runs []*chainRun, do func(r *chainRun)) {
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			do(r)
		}()
	}
	wg.Wait()
}

// CrashServe kills the harness's server at once, as a crash or an OOM
// kill would: nothing it would do at a clean stop is done.
func (e *Env) CrashServe(s *Serve) {
	e.T.Helper()
	if s.Proc == nil && e.Box.Target.RemoteRestarts() && e.Box.Target.RemoteExecs() {
		e.Box.NoteServe("", "")
		e.crashRemote()
		return
	}
	if s.Proc == nil {
		e.T.Fatalf("crash serve: the staging server is not the harness's to kill: %s", e.Box.Target.RemoteLacks("exec"))
	}
	e.Box.NoteServe("", "")
	s.Proc.Kill()
}

// checkHostLimit reads the limits of r's attacker's plugin hosts: one
// running with the limit the attacker's own config set took a bound that
// is the operator's to set. A host not seen is said in the outcome: the
// check could not be made.
func (e *Env) checkHostLimit(r *chainRun) {
	e.T.Helper()
	l := r.ch.HostLimit
	hosts := e.hostsOnServer(r.a)
	if len(hosts) == 0 {
		r.outcome += "; no plugin host of " + r.a.Name + " seen: its limits not read"
		return
	}
	for _, h := range hosts {
		path := fmt.Sprintf("/proc/%d/limits", h.Pid)
		data, err := e.readOnHost(path, 1<<16)
		if err != nil {
			r.outcome += "; read the plugin host's limits: " + err.Error()
			continue
		}
		soft, err := procLimit(path, data, l.Limit)
		if err != nil {
			r.outcome += "; " + err.Error()
			continue
		}
		r.outcome += fmt.Sprintf("; its plugin host's %s: %d", strings.ToLower(l.Limit), soft)
		if soft == l.Value {
			e.chainFind(r, invariants.Finding{Invariant: invariants.Availability, Tenant: r.a.Name, Where: invariants.Where{Path: path},
				Detail: fmt.Sprintf("%s's plugin host runs with %s %d, which its own config.yaml set (plugins.host.%s): a bound of every tenant's host that only the operator may set",
					r.a.Name, strings.ToLower(l.Limit), soft, l.Key)})
		}
	}
}

// procLimit is the soft value of the limit named name in data, a
// /proc/<pid>/limits file read from path (-1 for unlimited).
func procLimit(path string, data []byte, name string) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") {
			continue
		}
		fields := strings.Fields(strings.TrimPrefix(line, name))
		if len(fields) == 0 {
			break
		}
		if fields[0] == "unlimited" {
			return -1, nil
		}
		v, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("read %s: %s: %w", path, name, err)
		}
		return v, nil
	}
	return 0, fmt.Errorf("read %s: no %q line", path, name)
}
