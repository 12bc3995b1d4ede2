package scenarios

import (
	"slices"
	"strings"

	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// faultyRun is what a self-test's faulty run, which ends once its fault is
// caught, lets a scenario skip: it proves one fault is caught, so what
// cannot catch it, or comes after the proof, is time spent on nothing.
// Zero in a catalog run and in a whole faulty run (SelfTestOptions.Whole).
type faultyRun struct {
	stopOn invariants.Invariant // the fault's expected invariant
	fault  string               // the seeded fault, a comma list
}

// runsChain says whether ch runs: always, but in a faulty run only the
// chains that fault re-opens (every chain names its fault; a fault that is
// a comma list is the control of the chains that need all of it), since
// the others would find nothing to show.
func (f faultyRun) runsChain(ch attack.Chain) bool {
	switch {
	case f.fault == "":
		return true
	case strings.Contains(f.fault, ","):
		return ch.ControlFaults() == f.fault
	}
	return ch.Fault == f.fault
}

// waitsForEscape says a faulty run waits for a process escape: the attack
// rows (reads and writes whose results show what they reached) cannot show
// one, so such a run skips them; the phases that end sessions, profiles
// and the server show it.
func (f faultyRun) waitsForEscape() bool { return f.stopOn == invariants.ProcessEscape }

// chainsOf is chains without those a faulty run skips (runsChain).
func (e *Env) chainsOf(chains []attack.Chain) []attack.Chain {
	return slices.DeleteFunc(slices.Clone(chains), func(ch attack.Chain) bool { return !e.faulty.runsChain(ch) })
}

// caughtBy says whether t's attack rows have shown what a faulty run
// expecting the request invariant waits for: a row whose result carried
// another tenant's canary goes to t's provider with t's next request, so
// the phase's check finds it; t's further rows would only pile more of
// the same into every later request of its session.
func (e *Env) caughtBy(t *tenants.Tenant) bool {
	return e.caughtWhere(func(h AttackHit) bool { return h.Tenant == t.Name })
}

// caught is caughtBy for any attacker: the chains of a faulty run stop
// at the first one whose probe brought another tenant's canary back.
func (e *Env) caught() bool {
	return e.caughtWhere(func(AttackHit) bool { return true })
}

func (e *Env) caughtWhere(match func(AttackHit) bool) bool {
	if e.faulty.stopOn != invariants.Request {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.ContainsFunc(e.Report.Attacks, match)
}
