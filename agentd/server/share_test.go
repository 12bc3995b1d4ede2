package server

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/fair"
	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/fakellm"
)

// spreadTurns starts two turns of profile b on each of three connections,
// their model calls held until the test ends, and returns the fixture.
func spreadTurns(t *testing.T, set faults.Set) *fixture {
	t.Helper()
	release := make(chan struct{})
	f := newFixtureWith(t, heldForB(release), func(o *Options) {
		o.Limits = Limits{Turns: 8, ProfileTurns: 2}
		o.Faults = set
	})
	t.Cleanup(func() { close(release) }) // before the fixture's own cleanup, which waits for the held calls
	for i := range 3 {
		c := newConn(fmt.Sprintf("spread-%d", i))
		for range 2 {
			sid := sessionID(t, f.call(c, "session.create", map[string]any{"profile": "b"}))
			require.Equal(t, 0, code(f.call(c, "prompt.submit", map[string]any{"session_id": sid, "text": "go"})))
		}
	}
	return f
}

// A profile's connections share its turns: over three connections it
// still runs its two at once, and the rest wait.
func TestSpreadingOverConnectionsBuysNoShare(t *testing.T) {
	t.Parallel()
	f := spreadTurns(t, nil)
	waitStats(t, f.srv.turnQ, "b's two turns running and four waiting", func(st fair.Stats) bool {
		return st.Running == 2 && st.Groups["b"] == fair.GroupStats{Running: 2, Waiting: 4, Members: 3}
	})
	_, err := f.llm.WaitRequests(context.Background(), fakellm.KindMain, 2)
	require.NoError(t, err)
	require.Len(t, modelCalls(f.llm, "model-b"), 2, "b's turns in flight stay at its share")
}

// The positive control: with per-connection-share each connection holds a
// share of its own, and b runs three times its limit at once.
func TestPerConnectionShareFaultMultipliesTheShare(t *testing.T) {
	t.Parallel()
	f := spreadTurns(t, faults.Set{faults.PerConnectionShare: true})
	_, err := f.llm.WaitRequests(context.Background(), fakellm.KindMain, 6)
	require.NoError(t, err, "all six turns of b call their provider at once")
	require.Len(t, modelCalls(f.llm, "model-b"), 6)
	require.Equal(t, 6, f.srv.turnQ.Stats().Running)
}
