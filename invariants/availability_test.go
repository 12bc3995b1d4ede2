package invariants

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func ms(ns ...int) []time.Duration {
	out := make([]time.Duration, len(ns))
	for i, n := range ns {
		out[i] = time.Duration(n) * time.Millisecond
	}
	return out
}

func TestP99(t *testing.T) {
	t.Parallel()
	assert.Equal(t, time.Duration(0), P99(nil))
	assert.Equal(t, 5*time.Millisecond, P99(ms(5)))
	assert.Equal(t, 9*time.Millisecond, P99(ms(3, 9, 1)))
	var hundred []int
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, i)
	}
	assert.Equal(t, 99*time.Millisecond, P99(ms(hundred...)))
}

func TestAvailabilityOf(t *testing.T) {
	t.Parallel()
	// Positive control: a neighbour 10x slower, by more than the slack, and a
	// failed turn, are findings naming the tenant and the flooder.
	slow := AvailabilityOf(Latencies{Tenant: "beta", Flooder: "alpha", Baseline: ms(400, 500), Loaded: ms(900, 5000), Failed: 1, FirstErr: "database is locked"})
	require.Len(t, slow, 2)
	for _, f := range slow {
		assert.Equal(t, Availability, f.Invariant)
		assert.Equal(t, "beta", f.Tenant)
		assert.Equal(t, "alpha", f.Owner)
	}
	assert.Contains(t, slow[0].Detail, "1 of 3 turn(s) did not complete: database is locked")
	assert.Contains(t, slow[1].Detail, "p99 5s under the flood is 10.0x its baseline p99 500ms")

	// Within 3x: no finding; a fast baseline gets the slack.
	assert.Empty(t, AvailabilityOf(Latencies{Tenant: "beta", Flooder: "alpha", Baseline: ms(800), Loaded: ms(2300)}))
	assert.Empty(t, AvailabilityOf(Latencies{Tenant: "beta", Flooder: "alpha", Baseline: ms(20), Loaded: ms(1000)}))
	assert.Len(t, AvailabilityOf(Latencies{Tenant: "beta", Flooder: "alpha", Baseline: ms(20), Loaded: ms(1100)}), 1)
	assert.Equal(t, 1020*time.Millisecond, Limit(20*time.Millisecond))
	assert.Equal(t, 6*time.Second, Limit(2*time.Second))

	// No baseline: the check could not be made, which is not a pass.
	none := AvailabilityOf(Latencies{Tenant: "beta", Loaded: ms(1)})
	require.Len(t, none, 1)
	assert.Equal(t, Harness, none[0].Invariant)
}

func TestQuantile(t *testing.T) {
	t.Parallel()
	assert.Equal(t, time.Duration(0), Quantile(nil, 0.5))
	assert.Equal(t, 2*time.Millisecond, Quantile(ms(3, 1, 2), 0.5))
	assert.Equal(t, 2*time.Millisecond, Quantile(ms(4, 1, 3, 2), 0.5))
	assert.Equal(t, 4*time.Millisecond, Quantile(ms(4, 1, 3, 2), 1))
	assert.Equal(t, 1*time.Millisecond, Quantile(ms(4, 1, 3, 2), 0.01))
}

// Interleaved rounds: one noisy round does not decide, most rounds do,
// and a round far past its limit decides alone.
func TestAvailabilityOverRounds(t *testing.T) {
	t.Parallel()
	round := func(base, loaded int) Round { return Round{Baseline: ms(base), Loaded: ms(loaded)} }
	lat := func(rs ...Round) Latencies { return Latencies{Tenant: "beta", Flooder: "alpha", Rounds: rs} }

	// Limit of a 500 ms baseline: 1.5 s. One round over (1.7 s), two
	// within: no finding, and decided after the first two within.
	one := lat(round(500, 1700), round(500, 1000), round(500, 1200))
	assert.Empty(t, AvailabilityOf(one))
	p, over, decided := one.Verdict(3)
	assert.False(t, over)
	assert.True(t, decided)
	assert.Equal(t, 1200*time.Millisecond, p.Loaded, "the median round decides")

	// Two rounds of three over: a finding naming the median round.
	two := AvailabilityOf(lat(round(500, 1700), round(500, 1000), round(500, 1800)))
	require.Len(t, two, 1)
	assert.Equal(t, Availability, two[0].Invariant)
	assert.Contains(t, two[0].Detail, "p99 1.7s under the flood is 3.4x its baseline p99 500ms")
	assert.Contains(t, two[0].Detail, "over the limit in 2 of 3 round(s)")

	// Split after two rounds: undecided, a third round is wanted.
	_, over, decided = lat(round(500, 1700), round(500, 1000)).Verdict(3)
	assert.False(t, over)
	assert.False(t, decided)
	_, _, decided = lat(round(500, 1700)).Verdict(3)
	assert.False(t, decided)
	_, over, decided = lat(round(500, 1700), round(500, 1600)).Verdict(3)
	assert.True(t, over)
	assert.True(t, decided)

	// Decisive: one round at twice its limit (3 s) decides at once.
	p, over, decided = lat(round(500, 3100)).Verdict(3)
	assert.True(t, over)
	assert.True(t, decided)
	assert.Equal(t, 3100*time.Millisecond, p.Loaded)
	assert.Len(t, AvailabilityOf(lat(round(500, 1000), round(500, 3100), round(500, 1000))), 1)

	// Every round compares with its own baseline: a slow machine in one
	// round raises both of its windows alike.
	assert.Empty(t, AvailabilityOf(lat(round(500, 1400), round(1000, 2900), round(500, 1300))))
}

// The control: a neighbour's slowdown is a finding only when it exceeds
// the machine control's by the limit; a round whose control slowed past
// MaxMachine, with the neighbour within its limit, decides nothing, and a
// check left with such rounds is inconclusive (a failed control), never a
// pass.
func TestAvailabilityAgainstTheControl(t *testing.T) {
	t.Parallel()
	// The control's probes in a window: n of them around d ms.
	probes := func(d int) []time.Duration { return ms(d, d, d, d+1, d-1) }
	round := func(base, loaded, ctlAlone, ctlLoaded int) Round {
		return Round{Baseline: ms(base), Loaded: ms(loaded), ControlBaseline: probes(ctlAlone), ControlLoaded: probes(ctlLoaded)}
	}
	lat := func(rs ...Round) Latencies { return Latencies{Tenant: "beta", Flooder: "alpha", Rounds: rs} }

	// 5x slower with the machine 2x slower: the limit is 3x the 1 s the
	// machine gives the baseline (3 s), and 2.5 s is within it.
	slowMachine := lat(round(500, 2500, 10, 20), round(500, 2500, 10, 20))
	assert.Empty(t, AvailabilityOf(slowMachine))
	p := slowMachine.P99s()[0]
	assert.InDelta(t, 2.0, p.Machine, 0.01)
	assert.Equal(t, 3*time.Second, p.Limit)
	assert.False(t, p.Inconclusive)

	// The same neighbour with the machine unslowed: a finding that names
	// the control's share.
	fast := AvailabilityOf(lat(round(500, 2500, 10, 10), round(500, 2500, 10, 11)))
	require.Len(t, fast, 1)
	assert.Equal(t, Availability, fast[0].Invariant)
	assert.Contains(t, fast[0].Detail, "5.0x its baseline p99 500ms, where the machine control ran 1.0x slower")
	assert.Contains(t, fast[0].Detail, "over the limit in 2 of 2 round(s)")

	// A saturated machine (the control 4x slower) and a neighbour within
	// its limit: nothing is judged; after the planned rounds, inconclusive.
	sat := lat(round(500, 2000, 10, 40), round(500, 2100, 10, 45), round(500, 1900, 10, 40))
	j := sat.Judge(3)
	assert.True(t, j.Inconclusive)
	assert.False(t, j.Over)
	assert.Equal(t, 3, j.Unjudged)
	assert.InDelta(t, 4.5, j.Typical.Machine, 0.01, "the round whose control slowed the most shows")
	inc := AvailabilityOf(sat)
	require.Len(t, inc, 1)
	assert.Equal(t, Control, inc[0].Invariant, "a check not made is a failed control, not a pass")
	assert.False(t, inc[0].Invariant.Leak())
	assert.Contains(t, inc[0].Detail, "inconclusive: the machine control ran 4.5x slower")
	assert.Contains(t, inc[0].Detail, "in 3 of 3 round(s)")
	// One such round of three planned is not inconclusive yet: more are
	// wanted.
	j = lat(round(500, 2000, 10, 40)).Judge(3)
	assert.False(t, j.Inconclusive)
	assert.False(t, j.Decided)

	// A starved neighbour on a saturated machine is still a finding: it
	// was slowed far more than the machine.
	starved := AvailabilityOf(lat(round(200, 30000, 10, 50)))
	require.Len(t, starved, 1)
	assert.Equal(t, Availability, starved[0].Invariant)

	// Two rounds judged within decide a pass whatever the third; one over,
	// one within and one unjudged decide nothing.
	assert.Empty(t, AvailabilityOf(lat(round(500, 600, 10, 10), round(500, 2000, 10, 40), round(500, 700, 10, 11))))
	mixed := lat(round(500, 2500, 10, 10), round(500, 600, 10, 10), round(500, 2000, 10, 40)).Judge(3)
	assert.True(t, mixed.Inconclusive)
	assert.Equal(t, 1, mixed.Overs)

	// A control with too few probes measures nothing: inconclusive.
	few := Round{Baseline: ms(500), Loaded: ms(600), ControlBaseline: ms(10), ControlLoaded: ms(10, 11, 12)}
	fp := lat(few).P99s()[0]
	assert.Equal(t, 0.0, fp.Machine)
	assert.True(t, fp.Inconclusive)
	fewF := AvailabilityOf(lat(few))
	require.Len(t, fewF, 1)
	assert.Contains(t, fewF[0].Detail, "too few probes")

	// A loaded turn past DecisiveAfter decides its round on any machine a
	// round is judged on.
	b := 150 * time.Millisecond
	cut := DecisiveAfter(b)
	assert.Equal(t, Limit(450*time.Millisecond), OverAfter(b))
	assert.Equal(t, time.Duration(Decisive*float64(Limit(time.Duration(MaxMachine*float64(b))))), cut)
	over := lat(Round{Baseline: []time.Duration{b}, Loaded: []time.Duration{OverAfter(b) + time.Millisecond}, ControlBaseline: probes(10), ControlLoaded: probes(30)}).P99s()[0]
	assert.True(t, over.Over(), "past OverAfter is over on a machine MaxMachine times slower")
	j = lat(Round{Baseline: []time.Duration{b}, Loaded: []time.Duration{cut}, ControlBaseline: probes(10), ControlLoaded: probes(30)}).Judge(3)
	assert.True(t, j.Over)
	assert.True(t, j.Decided)
}

// TestSlackScalesWithTheControl: a round with a machine control gets
// SlackUnits of its unit of work as slack (between MinSlackFloor and
// MinSlack), so a starved neighbour on a fast machine is over its limit,
// where the fixed second hid it, and a fair server's rounds (measured on
// the same machine) stay within theirs.
func TestSlackScalesWithTheControl(t *testing.T) {
	t.Parallel()
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	assert.Equal(t, MinSlack, Slack(0), "no control: the fixed second")
	assert.Equal(t, MinSlackFloor, Slack(us(1000)))
	assert.Equal(t, 138*time.Millisecond, Slack(us(2300)))
	assert.Equal(t, MinSlack, Slack(20*time.Millisecond), "never more than the second")
	assert.Equal(t, Limit(time.Second), LimitWith(time.Second, 0))

	probes := func(d time.Duration) []time.Duration { return []time.Duration{d, d, d, d + us(50), d - us(50)} }
	round := func(base, loaded time.Duration, ctlAlone, ctlLoaded time.Duration) Round {
		return Round{Baseline: []time.Duration{base}, Loaded: []time.Duration{loaded}, ControlBaseline: probes(ctlAlone), ControlLoaded: probes(ctlLoaded)}
	}
	lat := func(rs ...Round) Latencies { return Latencies{Tenant: "beta", Flooder: "alpha", Rounds: rs} }

	// An agentd with no limits, at rest: 731 ms and 864 ms from 7 ms
	// baselines, the control 2.3 ms alone and 3.1-3.5 ms under the flood.
	starved := lat(round(7*time.Millisecond, 731*time.Millisecond, us(2290), us(3100)),
		round(7*time.Millisecond, 864*time.Millisecond, us(2300), us(3530)))
	assert.Less(t, 864*time.Millisecond, Limit(7*time.Millisecond), "the fixed second held this round within (the positive control)")
	j := starved.Judge(3)
	assert.True(t, j.Over)
	assert.True(t, j.Decided, "decisive alone: far past its limit")
	found := AvailabilityOf(starved)
	require.Len(t, found, 1)
	assert.Equal(t, Availability, found[0].Invariant)
	assert.Contains(t, found[0].Detail, "at least +")

	// A fair agentd on the same machine: at rest (67 ms from 13 ms), and
	// under four busy loops (144 ms from 15 ms, the control 5.2 ms).
	assert.Empty(t, AvailabilityOf(lat(round(13*time.Millisecond, 67*time.Millisecond, us(2260), us(2340)),
		round(15*time.Millisecond, 144*time.Millisecond, us(5240), us(5300)),
		round(10*time.Millisecond, 57*time.Millisecond, us(2370), us(2540)))))
}
