package scenarios

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/invariants"
)

// A check the machine control could not judge surfaces as a failed
// control: the row says inconclusive, the finding is no leak, and the
// scenario's verdict is failed, never pass (a finding fails the run's T).
func TestAnInconclusiveAvailabilityCheckFailsTheRun(t *testing.T) {
	t.Parallel()
	ms := func(d int) []time.Duration { return []time.Duration{time.Duration(d) * time.Millisecond} }
	probes := func(d int) []time.Duration {
		return []time.Duration{time.Duration(d) * time.Millisecond, time.Duration(d) * time.Millisecond, time.Duration(d) * time.Millisecond}
	}
	// The neighbour within its limit in every round, the control 4x
	// slower under the flood in every round: nothing is judged.
	var rounds []invariants.Round
	for range noisyRounds {
		rounds = append(rounds, invariants.Round{Baseline: ms(200), Loaded: ms(700), ControlBaseline: probes(5), ControlLoaded: probes(20)})
	}
	e := &Env{T: t, Report: &Report{}}
	e.CheckAvailability(invariants.Latencies{Tenant: "beta", Flooder: "alpha", Rounds: rounds})
	require.Len(t, e.Report.Availability, 1)
	row := e.Report.Availability[0]
	assert.True(t, row.Inconclusive)
	assert.InDelta(t, 4.0, row.Machine, 0.01)
	require.Len(t, e.pending, 1)
	f := e.pending[0]
	assert.Equal(t, invariants.Control, f.Invariant)
	assert.False(t, f.Invariant.Leak())
	assert.Contains(t, f.Detail, "inconclusive")
	rep := &Report{Phases: []PhaseReport{{Findings: e.pending}}}
	assert.Equal(t, Failed, verdict(rep, true), "a run with a finding has failed its T")

	// The same rounds with the machine unslowed pass: the control decides.
	for i := range rounds {
		rounds[i].ControlLoaded = probes(5)
	}
	e = &Env{T: t, Report: &Report{}}
	e.CheckAvailability(invariants.Latencies{Tenant: "beta", Flooder: "alpha", Rounds: rounds})
	assert.Empty(t, e.pending)
	assert.False(t, e.Report.Availability[0].Inconclusive)
}

// The spec expects the snapshots its turns make: a warm-up and two
// windows a round, every round.
func TestNoisyNeighbourSpec(t *testing.T) {
	t.Parallel()
	spec, err := Default().Get("noisy-neighbour")
	require.NoError(t, err)
	assert.Equal(t, 1+2*neighbourTurns*noisyRounds, spec.Snapshots(3))
	assert.GreaterOrEqual(t, noisyRounds, 3, "a majority of rounds needs three")
}
