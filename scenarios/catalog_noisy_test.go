package scenarios

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
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
		rounds = append(rounds, invariants.Round{Baseline: ms(200), Loaded: ms(500), ControlBaseline: probes(5), ControlLoaded: probes(20)})
	}
	e := &Env{T: t, Report: &Report{}}
	e.CheckAvailability(invariants.Latencies{Tenant: "beta", Flooder: "alpha", Rounds: rounds})
	require.Len(t, e.Report.Availability, 1)
	row := e.Report.Availability[0]
	assert.True(t, row.Inconclusive)
	assert.InDelta(t, 4.0, row.Machine, 0.01)
	assert.Equal(t, noisyRounds, row.Rounds)
	assert.Equal(t, noisyRounds, row.Unjudged)
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
	assert.Zero(t, e.Report.Availability[0].Unjudged)
}

// The spec expects the snapshots its turns make: a warm-up and two
// windows a round, every round.
func TestNoisyNeighbourSpec(t *testing.T) {
	t.Parallel()
	spec, err := Default().Get("noisy-neighbour")
	require.NoError(t, err)
	assert.Equal(t, 1+2*neighbourTurns*noisyMaxRounds, spec.Snapshots(3))
	assert.GreaterOrEqual(t, noisyRounds, 3, "a majority of rounds needs three")
	assert.Greater(t, noisyMaxRounds, noisyRounds)
}

// The rounds stop once every neighbour is decided, after noisyRounds at
// the latest when every round was judged. A verdict left undecided by
// rounds the machine control could not judge gets more rounds, up to
// noisyMaxRounds, while one side can still win a majority of them; it is
// then judged on every round run, the unjudged ones voting for neither
// side.
func TestNoisyNeighbourRunsMoreRoundsOnlyWhileTheyCanDecide(t *testing.T) {
	t.Parallel()
	ms := func(d int) []time.Duration {
		out := make([]time.Duration, 5)
		for i := range out {
			out[i] = time.Duration(d) * time.Millisecond
		}
		return out
	}
	round := map[byte]invariants.Round{
		'W': {Baseline: ms(200), Loaded: ms(300), ControlBaseline: ms(5), ControlLoaded: ms(5)},  // within its limit
		'O': {Baseline: ms(200), Loaded: ms(900), ControlBaseline: ms(5), ControlLoaded: ms(5)},  // over its 600 ms (1.5x), not decisively
		'U': {Baseline: ms(200), Loaded: ms(700), ControlBaseline: ms(5), ControlLoaded: ms(20)}, // the control 4x slower: unjudged
	}
	lat := func(rs string) invariants.Latencies {
		l := invariants.Latencies{Tenant: "beta", Flooder: "alpha"}
		for i := range len(rs) {
			l.Rounds = append(l.Rounds, round[rs[i]])
		}
		return l
	}
	for _, tc := range []struct {
		rounds string // one neighbour's rounds so far
		done   bool
		// want is the check's end: "pass", "over" or "inconclusive" (only
		// for a done case).
		want string
	}{
		{"W", false, ""},
		{"WW", true, "pass"},
		{"OO", true, "over"},
		{"WO", false, ""},
		{"WOW", true, "pass"},
		{"WU", false, ""},
		{"WUU", false, ""},      // 3 of 5 can still be within
		{"WUUW", false, ""},     // 2 of 4: one more
		{"WUUWW", true, "pass"}, // 3 of 5
		{"WUUWU", true, "inconclusive"},
		{"WUUWO", true, "inconclusive"},
		{"UUU", true, "inconclusive"}, // 2 more rounds cannot make 3 of 5
		{"OUU", false, ""},
		{"OUUOO", true, "over"},
		{"UWU", false, ""},
	} {
		l := lat(tc.rounds)
		assert.Equal(t, tc.done, noisyDone([]invariants.Latencies{l}, len(tc.rounds)), "rounds %s", tc.rounds)
		if !tc.done {
			continue
		}
		j := l.Judge(0)
		got := "pass"
		switch {
		case j.Over:
			got = "over"
		case j.Inconclusive:
			got = "inconclusive"
		}
		assert.Equal(t, tc.want, got, "rounds %s", tc.rounds)
		assert.Equal(t, tc.want != "inconclusive", j.Decided, "rounds %s", tc.rounds)
	}
	// Every neighbour must be done: one decided, one with rounds to go.
	assert.False(t, noisyDone([]invariants.Latencies{lat("WW"), lat("WUU")}, 3))
	assert.True(t, noisyDone([]invariants.Latencies{lat("WW"), lat("WWU")}, 3))
}

// Before a round's baseline, the noisy neighbour waits until the last
// flood's turns no longer reach the flooder's provider (a server that runs
// a closed connection's turns on would slow that baseline, and so raise
// its own limit), and goes on, logged, when they never stop.
func TestAwaitDrainedWaitsOutTheFloodsLastTurns(t *testing.T) {
	t.Parallel()
	srv, err := fakellm.New(fakellm.Options{AuxResponder: func(fakellm.Record) fakellm.Response { return fakellm.Text("ok") }})
	require.NoError(t, err)
	defer srv.Close()
	fl := &tenants.Tenant{Name: "alpha", Provider: srv}
	g := &harness.GatewayClient{Base: srv.URL}
	// send posts n turns' requests, 20 ms apart (n < 0: until stop closes).
	send := func(n int, stop <-chan struct{}) {
		for i := 0; n < 0 || i < n; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			_, err := g.Chat(t.Context(), "/v1/chat/completions", "k", "a flood turn", false)
			assert.NoError(t, err)
		}
	}
	// The Env runs on harness.RunStandalone's T, whose outcome keeps the
	// lines the wait logs.
	endedEarly, first := false, 0
	out := harness.RunStandalone(t.Context(), "drain", t.TempDir(), false, func(st harness.T) {
		e := &Env{T: st, Ctx: st.Context(), Report: &Report{}}
		stateOf(e, noisyKey).flooder = fl

		// The last flood's 15 turns reach the provider after its stop:
		// the wait ends only once they have. (Its quiet, 2 s, is far
		// more than two requests 20 ms apart take on a loaded machine.)
		done := make(chan struct{})
		go func() { defer close(done); send(15, nil) }()
		e.awaitDrained(1, 2*time.Second, time.Minute)
		select {
		case <-done:
		default:
			endedEarly = true
			<-done
		}
		first = requestCount(fl)

		// Turns that never stop: the wait gives up at its bound and the
		// round goes on, logged.
		never, sent := make(chan struct{}), make(chan struct{})
		go func() { defer close(sent); send(-1, never) }()
		e.awaitDrained(2, 2*time.Second, 500*time.Millisecond)
		close(never)
		<-sent
	})
	require.False(t, out.Failed, "%s", strings.Join(out.Log, "\n"))
	assert.False(t, endedEarly, "the wait ended while the flood's turns still reached the provider")
	assert.Equal(t, 15, first, "every turn reached the provider")
	log := strings.Join(out.Log, "\n")
	assert.Contains(t, log, "round 1: the last flood's turns done")
	assert.Contains(t, log, "round 2: the server still ran the last flood's turns after 500ms")
}
