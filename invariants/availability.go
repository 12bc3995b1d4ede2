package invariants

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/tenantcanary/tenantcanary/tenants"
)

// MaxSlowdown is how many times its own baseline p99 a tenant's p99 may
// grow while another tenant floods the server.
const MaxSlowdown = 3.0

// MinSlack is the least a tenant's p99 may grow by under a flood,
// whatever its baseline: a turn of a few milliseconds tripled is still
// within the noise of a shared machine. The noisy-neighbour flood (10,000
// workers each keeping a turn running, from a process of its own) costs a
// fair agentd a delay of its own, not a multiple of the baseline: on 2
// cores under a load of 6 to 16 (four busy loops among it), 0.16-1.2 s
// under the flood from 60-430 ms baselines (canary-run's agentd), 0.5-1.1 s
// from 0.1-0.3 s (built with -race), where an agentd with no limits kept
// its neighbours past twice their limit (over 2 s, where their turns are
// cut) in the first round of every run. One second sits above the first
// and below the second.
const MinSlack = time.Second

// SlackUnits is how many of the machine control's units of work (its time
// alone, ControlQuantile, stretched by the round's machine slowdown) a
// tenant's p99 may grow by under a flood: a round with a control gets
// that slack, between MinSlackFloor and MinSlack, instead of MinSlack.
// What a fair server adds under the flood is work, so it scales with the
// machine, and a fast machine's second would hide a starved neighbour: on
// 2 cores (2026-12-04; the control's unit 2.2-2.6 ms at rest, 2.2-10.4 ms
// under four busy loops) a fair agentd added at most 30 units (67 ms at
// rest, 144 ms under the loops), one with no limits at least 127 (0.3 to
// 1.8 s at rest, under the old second in about half its runs; 290 and
// more under the loops). Sixty sits twice away from both.
const SlackUnits = 60

// MinSlackFloor is the least slack of a round with a control: a few
// milliseconds of timer and scheduler noise is no starvation.
const MinSlackFloor = 100 * time.Millisecond

// Decisive is how far past its limit one round's p99 must be to decide a
// finding alone, without a majority of rounds: a server that starves its
// neighbours (seconds per turn) is past it at once, the noise of a shared
// machine on a fair server is not.
const Decisive = 2.0

// MaxMachine is the most the machine control may slow under a flood for a
// round to be judged: past it, the machine alone is as slow as a starved
// neighbour would be (MaxSlowdown), so a neighbour within its limit proves
// nothing, and the round is inconclusive. (A neighbour past its limit
// still is: it was slowed that much more than the machine.)
const MaxMachine = MaxSlowdown

// ControlQuantile is the quantile of the control's times a window is
// summed up by. The control is probed every few milliseconds, a window
// holds dozens of probes: its median is what the machine does to a unit of
// work in that window, where its tail is a single preemption.
const ControlQuantile = 0.5

// MinControlProbes is the fewest probes of the control a window needs
// for its time to mean anything.
const MinControlProbes = 3

// Round is one baseline window of a tenant's turns and the window under
// another tenant's load right after it, with the machine control's times
// in the same two windows. Rounds interleave (alone, loaded, alone,
// loaded, ...) so that the machine's own load, which varies over a run,
// weighs on both sides of every comparison alike; the control measures
// what is left: what the flood costs the machine (its cores, the
// harness), not the server, in this round.
type Round struct {
	Baseline []time.Duration
	Loaded   []time.Duration
	// ControlBaseline and ControlLoaded are the control's probe times in
	// the two windows (none: the round has no control, and the machine
	// counts as unslowed).
	ControlBaseline []time.Duration
	ControlLoaded   []time.Duration
}

// Latencies are one tenant's turn times in one run: alone (Baseline) and
// while another tenant floods the server (Loaded), or, interleaved, in
// Rounds (then Baseline and Loaded are unused); and the turns under the
// flood that did not complete, with the first error.
type Latencies struct {
	Tenant   string
	Flooder  string
	Baseline []time.Duration
	Loaded   []time.Duration
	Rounds   []Round
	Failed   int
	FirstErr string
}

// P99 is the 99th percentile of ds (nearest rank), or 0 for none.
func P99(ds []time.Duration) time.Duration { return Quantile(ds, 0.99) }

// Quantile is the q quantile of ds (nearest rank, 0 < q <= 1), or 0 for
// none.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(math.Ceil(q*float64(len(s)) - 1e-9))
	return s[min(max(rank, 1), len(s))-1]
}

// Limit is the p99 a tenant with baseline p99 b may reach under a flood:
// MaxSlowdown times b, and never less than b plus MinSlack.
func Limit(b time.Duration) time.Duration { return LimitWith(b, 0) }

// LimitWith is Limit on a machine whose control does a unit of work in
// unit: the slack is SlackUnits of them, between MinSlackFloor and
// MinSlack (MinSlack for a unit of 0: no control).
func LimitWith(b, unit time.Duration) time.Duration {
	return max(time.Duration(float64(b)*MaxSlowdown), b+Slack(unit))
}

// Slack is the least a tenant's p99 may grow by under a flood on a machine
// whose control does a unit of work in unit (see SlackUnits).
func Slack(unit time.Duration) time.Duration {
	if unit <= 0 {
		return MinSlack
	}
	return min(MinSlack, max(MinSlackFloor, SlackUnits*unit))
}

// Scaled is b on a machine m times slower.
func Scaled(b time.Duration, m float64) time.Duration {
	return time.Duration(float64(b) * max(1, m))
}

// OverAfter is the loaded p99 past which a round of a tenant with
// baseline p99 b is over its limit on any machine a round is judged on
// (one the control shows at most MaxMachine times slower): more turns in
// that window can only raise its p99, not bring it back.
func OverAfter(b time.Duration) time.Duration { return Limit(Scaled(b, MaxMachine)) }

// DecisiveAfter is how long a turn under the flood of a tenant with
// baseline p99 b may take before its round is decided alone: Decisive
// times OverAfter. A turn that takes longer need not be waited for; its
// time so far is a lower bound that already decides.
func DecisiveAfter(b time.Duration) time.Duration {
	return time.Duration(Decisive * float64(OverAfter(b)))
}

// RoundP99 is one round's p99s, how much slower the machine control ran
// under the flood (Machine), and how far the loaded p99 is past the
// round's limit (Excess > 1: over it): the limit is Limit of the baseline
// as the machine, slowed, would run it.
type RoundP99 struct {
	Baseline, Loaded, Limit time.Duration
	Excess                  float64
	// Machine is the control's time under the flood over its time alone
	// (ControlQuantile of each window): 1 for a round without a control,
	// never less; 0 when the control has too few probes to say.
	Machine float64
	// ControlBaseline and ControlLoaded are the control's times (0
	// without one).
	ControlBaseline, ControlLoaded time.Duration
	// Inconclusive: within the limit, but the control slowed past
	// MaxMachine (or could not be measured): the round decides nothing.
	Inconclusive bool
}

// Ratio is the loaded p99 over the baseline p99 (0 without a baseline).
func (r RoundP99) Ratio() float64 {
	if r.Baseline <= 0 {
		return 0
	}
	return float64(r.Loaded) / float64(r.Baseline)
}

// Over reports whether the round's loaded p99 is past its limit.
func (r RoundP99) Over() bool { return r.Loaded > r.Limit }

// rounds are l's windows: its Rounds, or Baseline and Loaded as one.
func (l Latencies) rounds() []Round {
	if len(l.Rounds) > 0 {
		return l.Rounds
	}
	return []Round{{Baseline: l.Baseline, Loaded: l.Loaded}}
}

// machine is the control's slowdown in r (see RoundP99.Machine).
func (r Round) machine() (m float64, alone, loaded time.Duration) {
	if len(r.ControlBaseline) == 0 && len(r.ControlLoaded) == 0 {
		return 1, 0, 0
	}
	alone, loaded = Quantile(r.ControlBaseline, ControlQuantile), Quantile(r.ControlLoaded, ControlQuantile)
	if len(r.ControlBaseline) < MinControlProbes || len(r.ControlLoaded) < MinControlProbes || alone <= 0 {
		return 0, alone, loaded
	}
	return max(1, float64(loaded)/float64(alone)), alone, loaded
}

// P99s are the p99s of every round of l with a baseline (a round with no
// loaded turn completed has a loaded p99 of 0: its failures are a finding
// of their own).
func (l Latencies) P99s() []RoundP99 {
	var out []RoundP99
	for _, r := range l.rounds() {
		if len(r.Baseline) == 0 {
			continue
		}
		p := RoundP99{Baseline: P99(r.Baseline), Loaded: P99(r.Loaded)}
		p.Machine, p.ControlBaseline, p.ControlLoaded = r.machine()
		p.Limit = LimitWith(Scaled(p.Baseline, p.Machine), Scaled(p.ControlBaseline, p.Machine))
		p.Excess = float64(p.Loaded) / float64(p.Limit)
		p.Inconclusive = !p.Over() && (p.Machine == 0 || p.Machine > MaxMachine)
		out = append(out, p)
	}
	return out
}

// Judgement is l's p99 check over its rounds.
type Judgement struct {
	// Typical is the round that decides: the worst when one decides
	// alone, else the median one (by Excess), or for an inconclusive
	// check the round whose control slowed the most.
	Typical RoundP99
	// Over: the tenant's p99 under the flood is past its limit, in one
	// round Decisive times past it or in most rounds.
	Over bool
	// Decided: more rounds (of the planned number) could not change Over.
	Decided bool
	// Inconclusive: the planned rounds are run, and too many of them had
	// a control too slow to judge for the rest to decide: neither a pass
	// nor a finding of availability.
	Inconclusive bool
	// Rounds, Overs and Unjudged count the rounds, those over their
	// limit and the inconclusive ones.
	Rounds, Overs, Unjudged int
}

// Judge is l's p99 check when want rounds are planned.
func (l Latencies) Judge(want int) Judgement {
	ps := l.P99s()
	if len(ps) == 0 {
		return Judgement{}
	}
	j := Judgement{Rounds: len(ps)}
	for _, p := range ps {
		switch {
		case p.Over():
			j.Overs++
		case p.Inconclusive:
			j.Unjudged++
		}
	}
	within := len(ps) - j.Overs - j.Unjudged
	sort.Slice(ps, func(i, k int) bool { return ps[i].Excess < ps[k].Excess })
	worst := ps[len(ps)-1]
	want = max(want, len(ps))
	majority := want/2 + 1
	switch {
	case worst.Excess >= Decisive:
		j.Typical, j.Over, j.Decided = worst, true, true
	case j.Overs >= majority:
		j.Typical, j.Over, j.Decided = ps[len(ps)/2], true, true
	case within >= majority:
		j.Typical, j.Decided = ps[len(ps)/2], true
	case j.Unjudged == 0:
		// Undecided with every round judged: most rounds so far say.
		j.Typical, j.Over = ps[len(ps)/2], j.Overs > len(ps)/2
	default:
		// Undecided because rounds went unjudged: once the planned rounds
		// are run, inconclusive, shown by the round whose control slowed
		// the most (or could not be measured).
		j.Inconclusive = len(ps) >= want
		for _, p := range ps {
			if p.Inconclusive && (!j.Typical.Inconclusive || p.Machine == 0 || (j.Typical.Machine != 0 && p.Machine > j.Typical.Machine)) {
				j.Typical = p
			}
		}
	}
	return j
}

// Verdict is Judge as (typical, over, decided).
func (l Latencies) Verdict(want int) (typical RoundP99, over, decided bool) {
	j := l.Judge(want)
	return j.Typical, j.Over, j.Decided
}

// AvailabilityOf checks l: every turn under the flood completed, and their
// p99 stayed within the limit of the same round (see Judge): Limit of the
// baseline p99 as the machine, slowed by the flood as the control was,
// would run it. A neighbour's slowdown is a finding only when it exceeds
// the control's by the limit. A check whose rounds the control could not
// judge (the machine itself slowed past MaxMachine) is a failed control
// saying so: inconclusive, never a pass. A tenant with no baseline is a
// harness finding: there is nothing to compare with.
func AvailabilityOf(l Latencies) []Finding {
	where := Where{Label: "turns of " + l.Tenant + " while " + l.Flooder + " floods"}
	const flood = tenants.Kind("flood") // the finding reads "carries <flooder>'s flood"
	var out []Finding
	base, loaded := 0, 0
	for _, r := range l.rounds() {
		base += len(r.Baseline)
		loaded += len(r.Loaded)
	}
	if base == 0 {
		return []Finding{{Invariant: Harness, Tenant: l.Tenant, Where: where, Detail: "no baseline turn to compare with"}}
	}
	if l.Failed > 0 {
		out = append(out, Finding{Invariant: Availability, Tenant: l.Tenant, Owner: l.Flooder, Kind: flood, Where: where,
			Detail: fmt.Sprintf("%d of %d turn(s) did not complete: %s", l.Failed, l.Failed+loaded, truncate(l.FirstErr, 300))})
	}
	j := l.Judge(0)
	p := j.Typical
	switch {
	case j.Over:
		out = append(out, Finding{Invariant: Availability, Tenant: l.Tenant, Owner: l.Flooder, Kind: flood, Where: where,
			Detail: fmt.Sprintf("p99 %v under the flood is %.1fx its baseline p99 %v%s (limit %v: %.0fx, at least +%v), over the limit in %d of %d round(s)",
				p.Loaded.Round(time.Millisecond), p.Ratio(), p.Baseline.Round(time.Millisecond), machineNote(p),
				p.Limit.Round(time.Millisecond), MaxSlowdown, Slack(Scaled(p.ControlBaseline, p.Machine)).Round(time.Millisecond), j.Overs, j.Rounds)})
	case j.Inconclusive:
		out = append(out, Finding{Invariant: Control, Tenant: l.Tenant, Where: where,
			Detail: fmt.Sprintf("inconclusive: the machine control ran %s under the flood (past %.0fx) in %d of %d round(s): a saturated machine slows the neighbour and the control alike, so the flood's cost to %s cannot be judged (its p99 went from %v to %v); run it on a quieter machine",
				machineSlowdown(p), MaxMachine, j.Unjudged, j.Rounds, l.Tenant, p.Baseline.Round(time.Millisecond), p.Loaded.Round(time.Millisecond))})
	}
	return out
}

// machineNote is what the control says of round p, for a finding.
func machineNote(p RoundP99) string {
	if p.ControlBaseline == 0 && p.ControlLoaded == 0 {
		return ""
	}
	return fmt.Sprintf(", where the machine control ran %s", machineSlowdown(p))
}

func machineSlowdown(p RoundP99) string {
	if p.Machine == 0 {
		return fmt.Sprintf("too few probes to measure (%v alone, %v under the flood)", p.ControlBaseline, p.ControlLoaded)
	}
	return fmt.Sprintf("%.1fx slower (%v alone, %v under the flood)", p.Machine, p.ControlBaseline.Round(10*time.Microsecond), p.ControlLoaded.Round(10*time.Microsecond))
}
