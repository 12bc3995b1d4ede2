package fair

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

func isGranted(t *Ticket) bool {
	select {
	case <-t.ready:
		return t.state == granted
	default:
		return false
	}
}

func mustEnqueue(t *testing.T, s *Scheduler, g, m string) *Ticket {
	t.Helper()
	tk, err := s.Enqueue(g, m)
	require.NoError(t, err)
	return tk
}

func TestGroupsTakeTurns(t *testing.T) {
	t.Parallel()
	s := New(Limits{Slots: 1})
	a1 := mustEnqueue(t, s, "alpha", "c1")
	a2 := mustEnqueue(t, s, "alpha", "c1")
	a3 := mustEnqueue(t, s, "alpha", "c2")
	b1 := mustEnqueue(t, s, "beta", "c9")
	require.True(t, isGranted(a1))
	require.False(t, isGranted(a2) || isGranted(a3) || isGranted(b1))
	a1.Release()
	require.True(t, isGranted(b1), "beta is served before alpha's second ticket")
	require.False(t, isGranted(a2) || isGranted(a3))
	b1.Release()
	require.True(t, isGranted(a3), "inside alpha, connection c2 is served before c1's second ticket")
	a3.Release()
	require.True(t, isGranted(a2))
	a2.Release()
	st := s.Stats()
	require.Equal(t, 0, st.Running)
	require.Empty(t, st.Groups, "idle groups are forgotten")
}

func TestManyMembersBuyOneGroupShare(t *testing.T) {
	t.Parallel()
	s := New(Limits{Slots: 8, PerGroup: 2, PerMember: 1})
	var flood []*Ticket
	for i := range 50 {
		flood = append(flood, mustEnqueue(t, s, "alpha", fmt.Sprintf("c%d", i)))
	}
	n := 0
	for _, tk := range flood {
		if isGranted(tk) {
			n++
		}
	}
	require.Equal(t, 2, n, "fifty connections of one profile hold the profile's two slots")
	b := mustEnqueue(t, s, "beta", "c")
	require.True(t, isGranted(b), "a neighbour gets a slot at once")
	one := mustEnqueue(t, s, "gamma", "x")
	two := mustEnqueue(t, s, "gamma", "x")
	require.True(t, isGranted(one))
	require.False(t, isGranted(two), "one connection holds one slot")
	require.Equal(t, Stats{Running: 4, Waiting: 49, Groups: map[string]GroupStats{
		"alpha": {Running: 2, Waiting: 48, Members: 50}, "beta": {Running: 1, Members: 1}, "gamma": {Running: 1, Waiting: 1, Members: 1},
	}}, s.Stats())
}

func TestQueueBoundsRefuse(t *testing.T) {
	t.Parallel()
	s := New(Limits{Slots: 1, MemberQueue: 2, GroupQueue: 3, Queue: 4})
	mustEnqueue(t, s, "g", "m") // holds the slot
	mustEnqueue(t, s, "g", "m")
	mustEnqueue(t, s, "g", "m")
	_, err := s.Enqueue("g", "m")
	var qf *QueueFullError
	require.ErrorAs(t, err, &qf)
	require.True(t, errors.Is(err, ErrQueueFull))
	require.Equal(t, "member", qf.Bound)
	mustEnqueue(t, s, "g", "n")
	_, err = s.Enqueue("g", "o")
	require.ErrorAs(t, err, &qf)
	require.Equal(t, "group", qf.Bound)
	mustEnqueue(t, s, "h", "p")
	_, err = s.Enqueue("i", "q")
	require.ErrorAs(t, err, &qf)
	require.Equal(t, "all", qf.Bound)
	require.Contains(t, err.Error(), "4 waiting in all")
}

func TestWaitEndsWithContextOrClose(t *testing.T) {
	t.Parallel()
	s := New(Limits{Slots: 1})
	hold := mustEnqueue(t, s, "g", "m")
	require.NoError(t, hold.Wait(context.Background()))
	gone := mustEnqueue(t, s, "g", "m")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, gone.Wait(ctx), context.Canceled)
	require.Equal(t, 0, s.Stats().Waiting, "a cancelled wait is withdrawn")
	next := mustEnqueue(t, s, "g", "m")
	errc := make(chan error, 1)
	go func() { errc <- next.Wait(context.Background()) }()
	s.Close()
	require.ErrorIs(t, <-errc, ErrClosed)
	_, err := s.Enqueue("g", "m")
	require.ErrorIs(t, err, ErrClosed)
	hold.Release()
	hold.Release() // twice is fine
	require.Equal(t, Stats{Groups: map[string]GroupStats{}}, s.Stats())
}

func TestNilSchedulerGrantsAll(t *testing.T) {
	t.Parallel()
	var s *Scheduler
	tk, err := s.Enqueue("g", "m")
	require.NoError(t, err)
	require.NoError(t, tk.Wait(context.Background()))
	tk.Release()
	s.Close()
}

func TestConcurrentUseKeepsTheCaps(t *testing.T) {
	t.Parallel()
	s := New(Limits{Slots: 6, PerGroup: 3, PerMember: 2})
	var running [3]atomic.Int32
	var peak [3]atomic.Int32
	var total atomic.Int32
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := i % 3
			tk, err := s.Enqueue(fmt.Sprint(g), fmt.Sprint(i%7))
			if err != nil {
				t.Error(err)
				return
			}
			if err := tk.Wait(context.Background()); err != nil {
				t.Error(err)
				return
			}
			n := running[g].Add(1)
			for p := peak[g].Load(); n > p && !peak[g].CompareAndSwap(p, n); p = peak[g].Load() {
			}
			if total.Add(1) > 6 {
				t.Error("more than 6 slots held")
			}
			total.Add(-1)
			running[g].Add(-1)
			tk.Release()
		}()
	}
	wg.Wait()
	for g := range peak {
		require.LessOrEqual(t, peak[g].Load(), int32(3), "group %d", g)
	}
	require.Equal(t, Stats{Groups: map[string]GroupStats{}}, s.Stats())
}
