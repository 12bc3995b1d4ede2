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
