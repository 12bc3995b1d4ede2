package scenarios

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Kinds of the canaries a hostile tenant mints.
const (
	HostileWrite tenants.Kind = "hostile_write" // in everything it writes
	EscapeMark   tenants.Kind = "escape_mark"   // in everything it starts
)

// Attack runs one attack row as t in session sid on c, with cs as its own
// canaries, and records which other tenants' canaries its result carried
// (the request invariant reports them as findings; the report names the
// row). Its ran-control proves the row ran: t's provider was asked with
// the instruction's nonce, made the call, and got its result back (ending
// with the row's end marker, but for a flood); a row that did not run is a
// failed control named "attack <row> of <tenant> did not run: <step>",
// never a pass, and Attack returns "".
func (e *Env) Attack(c *harness.Conn, t *tenants.Tenant, sid string, r attack.Row, cs attack.Canaries) string {
	e.T.Helper()
	prompt := attack.Prompt(r.Call(cs))
	mark := c.EventCount()
	ctx, cancel := e.ctx(e.Times.Turn)
	_, err := c.Turn(ctx, sid, prompt)
	cancel()
	proof := attackProof(t, prompt)
	if err != nil {
		// A server may end the turn after the tool ran and before its
		// result goes back to the model: a row that breaks the tenant's own
		// credential (a .env linked away) has its next step refused. The
		// tool's completion on the tenant's own connection proves the row
		// ran, by content.
		res, ok := ranInFrames(c, sid, mark, proof.Nonce)
		if !ok {
			e.SkipUnsupported(err)
			e.T.Fatalf("turn of %s: %v", t.Name, e.attributed(t, sid, err))
		}
		e.Logf("attack %s of %s ran; then the server ended its turn: %v", r.ID, t.Name, err)
		proof.Back, proof.Result = true, res
	}
	res := proof.Result
	if unsure := proof.Unsure(); unsure != "" {
		// Not a failed control: the control cannot tell. The row's check
		// is skipped by name; what came back is still scanned.
		e.skipRow(string(PositiveControl), "attack "+r.ID+" of "+t.Name+": "+unsure)
		e.Logf("attack %s of %s: %s", r.ID, t.Name, unsure)
		res = proof.Untied
	} else if miss := proof.Missing(r.Class != attack.Flood && !r.Refusable); miss != "" {
		e.proved(t, "attack "+r.ID, miss)
		e.Logf("attack %s of %s did not run: %s", r.ID, t.Name, miss)
		return ""
	} else {
		e.proved(t, "attack "+r.ID, "")
	}
	chk := e.checker(e.Box.Set.Tenants)
	seen := map[string]bool{}
	for _, f := range chk.TextLeaks("attack "+r.ID, []byte(res), t.Name) {
		seen[fmt.Sprintf("%s's %s", f.Owner, f.Kind)] = true
	}
	if len(seen) > 0 {
		hit := AttackHit{Tenant: t.Name, Row: r.ID}
		for k := range seen {
			hit.Reached = append(hit.Reached, k)
		}
		sort.Strings(hit.Reached)
		e.mu.Lock()
		e.Report.Attacks = append(e.Report.Attacks, hit)
		e.mu.Unlock()
		e.Logf("attack %s by %s reached %s", r.ID, t.Name, strings.Join(hit.Reached, ", "))
	}
	return res
}

// ranInFrames finds, among the events of session sid on c from index from
// on, one that carries the attack call's id (attack.CallID(nonce)) and,
// outside the call's arguments, the row's end marker: the tool completed,
// whatever came of the turn after. It returns that event's payload.
func ranInFrames(c *harness.Conn, sid string, from int, nonce string) (string, bool) {
	if nonce == "" {
		return "", false
	}
	// The server's events may carry its own form of the id (punctuation
	// dropped): the nonce, which is letters and digits, survives that.
	for _, ev := range c.Events() {
		if ev.Index < from || ev.SessionID != sid {
			continue
		}
		if text := c.WithoutArgs(ev); strings.Contains(text, nonce) && strings.Contains(text, attack.RowDone) {
			return text, true
		}
	}
	return "", false
}

// CloseSession closes session sid on c.
func (e *Env) CloseSession(c *harness.Conn, sid string) {
	e.T.Helper()
	e.Call(c, "session.close", map[string]any{"session_id": sid}, nil)
}

// SeeMarked is the positive control of the process-escape check: before
// the event that must end them, the processes carrying mark are seen.
func (e *Env) SeeMarked(t *tenants.Tenant, mark tenants.Canary, what string) {
	e.T.Helper()
	if !e.awaitMarked(mark, 15*time.Second) {
		e.markNotSeen(t, mark, what)
	}
}

// awaitMarked reports whether a process carrying mark is seen within d;
// the scenario's end counts as seen (it is no finding).
func (e *Env) awaitMarked(mark tenants.Canary, d time.Duration) bool {
	e.T.Helper()
	ev := invariants.Ended{Canaries: []tenants.Canary{mark}}
	w := Wait{What: "a process carrying the mark " + mark.Value, Within: d, Poll: 50 * time.Millisecond}
	err := Await(e.Ctx, w, func() (bool, string) {
		return len(e.live(ev)) > 0, "no such process"
	})
	var we *WaitError
	return !errors.As(err, &we) || we.Err != nil
}

// markNotSeen is the failed positive control of the escape check.
func (e *Env) markNotSeen(t *tenants.Tenant, mark tenants.Canary, what string) {
	e.T.Helper()
	if why := e.seesProcesses(); why != "" {
		// Not blind: not looking (a running server without
		// remote.processes), and the check says so.
		e.skip(string(invariants.ProcessEscape), why)
		return
	}
	e.Find(invariants.Finding{Invariant: invariants.Control, Tenant: t.Name, Where: invariants.Where{Label: what},
		Detail: fmt.Sprintf("no process carrying %s's mark %s was seen while it should live: the escape check would see nothing", t.Name, mark.Value)})
}

// seenWhileHeld runs attack.HeldSpawn as t in session sid on c and reports
// whether the process it starts, carrying mark, was seen while the call
// held it, and how long after the call began it was first seen (the turn
// that makes the call included): on a target that ends a terminal call's
// processes with the call, what proves the escape check sees a tenant's
// processes, and how soon it does under the run's load.
func (e *Env) seenWhileHeld(c *harness.Conn, t *tenants.Tenant, sid string, mark tenants.Canary) (bool, time.Duration) {
	e.T.Helper()
	ev := invariants.Ended{Canaries: []tenants.Canary{mark}}
	// The look ends with the call: what was not seen while it held the
	// process open is not seen.
	ctx, cancel := context.WithCancel(e.Ctx)
	var seen bool
	var within time.Duration
	var wg sync.WaitGroup
	wg.Add(1)
	start := time.Now()
	go func() {
		defer wg.Done()
		w := Wait{What: "a process carrying the mark " + mark.Value + " while the call holds it", Within: 2 * time.Minute, Poll: 50 * time.Millisecond}
		seen = Await(ctx, w, func() (bool, string) { return len(e.live(ev)) > 0, "no such process" }) == nil
		within = time.Since(start)
	}()
	e.Attack(c, t, sid, attack.HeldSpawn(heldSpawnSeconds), attack.Canaries{Mark: mark.Value})
	cancel()
	wg.Wait()
	return seen, within
}

// heldSpawnSeconds is how long attack.HeldSpawn holds its call open: many
// looks at the processes, on a loaded machine too.
const heldSpawnSeconds = 4

// EscapeGrace is how long, by default, the processes an event ends have to
// die before each survivor is a finding; a target says its own
// (harness.Target.EscapeGrace).
const EscapeGrace = harness.DefaultEscapeGrace

// CheckEscapes waits, up to the target's escape grace, for every process
// carrying ev's canaries to end: it returns as soon as none is left. Each
// survivor is a process_escape finding, and is then killed, so that it is
// reported once and outlives no run.
func (e *Env) CheckEscapes(ev invariants.Ended) {
	e.T.Helper()
	var carriers []procgroup.Carrier
	confirmed := false
	w := Wait{What: "every process carrying the canaries to end after " + ev.Event, Within: e.Box.Target.EscapeWithin(),
		Pause: func() time.Duration {
			if confirmed {
				return 20 * time.Millisecond
			}
			return 100 * time.Millisecond
		}}
	// Unmet, the wait is no failure of its own: each carrier left is a
	// finding.
	_ = Await(e.Ctx, w, func() (bool, string) {
		carriers = e.live(ev) // a scan of every process: once per look
		if len(carriers) > 0 {
			confirmed = false
			return false, describeProcs(carriers)
		}
		// A process in the middle of an exec cannot have its environment
		// read: none seen is believed on a second look.
		met := confirmed
		confirmed = true
		return met, "none seen, to be confirmed"
	})
	for _, f := range invariants.EscapesOf(ev, carriers) {
		e.Find(f)
	}
	if len(carriers) > 0 && e.Box.Target.URL == "" { // a running server's are not the harness's to kill
		e.killCarriers(ev)
	}
}

// killCarriers kills every live process carrying ev's canaries (they all
// descend from this run: the canaries are its own) and waits for them to go.
func (e *Env) killCarriers(ev invariants.Ended) {
	e.T.Helper()
	w := Wait{What: "the processes carrying this run's canaries to die", Within: 20 * time.Second, Poll: 20 * time.Millisecond}
	err := Await(e.Ctx, w, func() (bool, string) {
		if e.Box.Target.URL != "" { // listed and killed on the server's host
			left := e.live(ev)
			pids := make([]int, 0, len(left))
			for _, p := range left {
				pids = append(pids, p.Pid)
			}
			e.killOnHost("kill the processes carrying this run's canaries", pids...)
			return len(left) == 0, describeProcs(left)
		}
		left := invariants.Live(ev)
		for _, p := range left {
			_ = syscall.Kill(p.Pid, syscall.SIGKILL)
		}
		return len(left) == 0, describeProcs(left)
	})
	var we *WaitError
	if errors.As(err, &we) && we.Err == nil { // the scenario's end leaves them to its cleanup, as ever
		e.T.Errorf("%v", err)
	}
}

// describeProcs names each of ps by pid and command.
func describeProcs(ps []procgroup.Carrier) string {
	desc := make([]string, 0, len(ps))
	for _, p := range ps {
		desc = append(desc, fmt.Sprintf("%d (%s)", p.Pid, p.Comm))
	}
	return strings.Join(desc, ", ")
}

// everyCanary lists the canaries of ts, minted ones included.
func everyCanary(ts []*tenants.Tenant) []tenants.Canary {
	var out []tenants.Canary
	for _, t := range ts {
		out = append(out, t.Canaries()...)
	}
	return out
}

// pluginHostsOf lists the live plugin hosts of t: processes whose command
// line is a host's (the probe plugin's host_cmdline) and whose environment is t's (its provider key,
// or its home as AGENTD_HOME). Only the hosts themselves are listed, not
// the launchers around them (bwrap, agentd's Landlock sandbox-exec, whose
// command lines name the host's too): a plugin host that crashes or is
// OOM-killed dies alone, and what the launcher does then (end everything
// the host started) is what a host-death check judges. Killing the
// launcher's keeper as well would test a death no tenant can cause. It
// reads this machine's /proc: a running server's hosts are
// Env.hostsOnServer's, their pids the server host's.
func pluginHostsOf(e *Env, t *tenants.Tenant) []procgroup.Carrier {
	needles := []string{t.ProviderKey(), e.Box.Set.Layout.HomeVar + "=" + t.Home + "\x00"}
	seen := map[int]bool{}
	var found []procgroup.Carrier
	for _, p := range procgroup.Carrying(needles) {
		if e.probePlugin().IsHost(p.Cmdline) && !seen[p.Pid] {
			seen[p.Pid] = true
			found = append(found, p)
		}
	}
	var out []procgroup.Carrier
	for _, p := range found {
		launcher := false
		for _, d := range procgroup.Descendants(p.Pid) {
			if seen[d] {
				launcher = true // a host runs below it
				break
			}
		}
		if !launcher {
			out = append(out, p)
		}
	}
	return out
}

// atOnce runs fn for every tenant of ts at the same time, each in a
// goroutine of its own, and returns once all have returned: steps of
// different tenants that share nothing (each on its own connection and
// session, with its own canaries) take the time of the slowest tenant, not
// the sum. A Fatalf, FailNow or Skipf inside fn ends that tenant's
// goroutine; once every goroutine has returned, atOnce ends the phase the
// same way (the failure or skip is already recorded).
func (e *Env) atOnce(ts []*tenants.Tenant, fn func(t *tenants.Tenant)) {
	e.T.Helper()
	var wg sync.WaitGroup
	var ended atomic.Bool
	for _, t := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			completed := false
			defer func() {
				if r := recover(); r != nil {
					e.T.Errorf("%s: panic: %v", t.Name, r)
				}
				if !completed {
					ended.Store(true)
				}
			}()
			fn(t)
			completed = true
		}()
	}
	wg.Wait()
	if ended.Load() {
		runtime.Goexit()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// CheckAvailability records l in the report and adds its findings.
func (e *Env) CheckAvailability(l invariants.Latencies) {
	j := l.Judge(0)
	p := j.Typical // the round that decides
	row := AvailabilityRow{Tenant: l.Tenant, Flooder: l.Flooder, Baseline: p.Baseline, Loaded: p.Loaded, Ratio: p.Ratio(), Failed: l.Failed,
		Machine: p.Machine, Inconclusive: j.Inconclusive, Rounds: j.Rounds, Unjudged: j.Unjudged}
	e.mu.Lock()
	e.Report.Availability = append(e.Report.Availability, row)
	e.mu.Unlock()
	e.Logf("%s: baseline p99 %v, under %s's load p99 %v (%.1fx, %d failed; %d round(s), %d unjudged)", l.Tenant, row.Baseline, l.Flooder, row.Loaded, row.Ratio, l.Failed, row.Rounds, row.Unjudged)
	for _, f := range invariants.AvailabilityOf(l) {
		e.Find(f)
	}
}
