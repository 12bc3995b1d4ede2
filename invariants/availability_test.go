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
	assert.Empty(t, AvailabilityOf(Latencies{Tenant: "beta", Flooder: "alpha", Baseline: ms(500), Loaded: ms(1400)}))
	assert.Empty(t, AvailabilityOf(Latencies{Tenant: "beta", Flooder: "alpha", Baseline: ms(20), Loaded: ms(500)}))
	assert.Len(t, AvailabilityOf(Latencies{Tenant: "beta", Flooder: "alpha", Baseline: ms(20), Loaded: ms(600)}), 1)
	assert.Equal(t, 520*time.Millisecond, Limit(20*time.Millisecond))
	assert.Equal(t, 6*time.Second, Limit(2*time.Second))

	// No baseline: the check could not be made, which is not a pass.
	none := AvailabilityOf(Latencies{Tenant: "beta", Loaded: ms(1)})
	require.Len(t, none, 1)
	assert.Equal(t, Harness, none[0].Invariant)
}
