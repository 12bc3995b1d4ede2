package scenarios

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
)

func TestAwaitReturnsOnceMet(t *testing.T) {
	t.Parallel()
	looks := 0
	err := Await(context.Background(), Wait{What: "the third look", Within: time.Minute, Poll: time.Millisecond}, func() (bool, string) {
		looks++
		return looks == 3, "looked"
	})
	require.NoError(t, err)
	assert.Equal(t, 3, looks, "it stops looking once met")
}

func TestAwaitNamesWhatItWaitedForAndTheLastState(t *testing.T) {
	t.Parallel()
	looks := 0
	err := Await(context.Background(), Wait{What: "the door to open", Within: 0, Poll: time.Millisecond}, func() (bool, string) {
		looks++
		return false, "shut, look " + string(rune('0'+looks))
	})
	var we *WaitError
	require.ErrorAs(t, err, &we)
	assert.Equal(t, 1, looks, "it looks once even with no time to wait")
	assert.Equal(t, "the door to open", we.What)
	assert.Equal(t, "shut, look 1", we.Last)
	assert.NoError(t, we.Err, "the deadline ended it, not the context")
	assert.Contains(t, err.Error(), "for the door to open; last state: shut, look 1")
}

func TestAwaitEndsWithItsContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	looks := 0
	// A deadline an hour away: only the context can end this wait.
	err := Await(ctx, Wait{What: "nothing", Within: time.Hour, Poll: time.Millisecond}, func() (bool, string) {
		looks++
		if looks == 2 {
			cancel()
		}
		return false, "unmet"
	})
	require.ErrorIs(t, err, context.Canceled)
	var we *WaitError
	require.ErrorAs(t, err, &we)
	assert.Equal(t, "unmet", we.Last)
	assert.Contains(t, err.Error(), "context canceled")
}

func TestAwaitTakesEachPauseFromPause(t *testing.T) {
	t.Parallel()
	var asked int
	err := Await(context.Background(), Wait{What: "the fourth look", Within: time.Minute, Poll: time.Hour,
		Pause: func() time.Duration { asked++; return time.Millisecond }}, func() (bool, string) {
		return asked == 3, "asked " + string(rune('0'+asked))
	})
	require.NoError(t, err, "Pause, not the hour-long Poll, spaced the looks")
	assert.Equal(t, 3, asked, "Pause is asked before each next look")
}

func TestEventuallyFailsNamingWhatItWaitedForAndTheLastState(t *testing.T) {
	t.Parallel()
	after := false
	out := harness.RunStandalone(context.Background(), "eventually", t.TempDir(), false, func(ht harness.T) {
		e := &Env{T: ht, Ctx: context.Background()}
		e.Eventually("the job to run", 0, func() (bool, string) { return false, "job queued" })
		after = true
	})
	assert.True(t, out.Failed)
	assert.False(t, after, "a failed wait ends the phase")
	assert.Contains(t, strings.Join(out.Log, "\n"), "for the job to run; last state: job queued")
}

func TestEventuallyReturnsOnceMet(t *testing.T) {
	t.Parallel()
	looks := 0
	out := harness.RunStandalone(context.Background(), "eventually", t.TempDir(), false, func(ht harness.T) {
		e := &Env{T: ht, Ctx: context.Background()}
		e.Eventually("the second look", time.Minute, func() (bool, string) { looks++; return looks == 2, "" })
	})
	assert.False(t, out.Failed, "%v", out.Log)
	assert.Equal(t, 2, looks)
}
