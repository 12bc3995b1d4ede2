package syncio

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A waiter on a condition that never comes true returns when its context
// ends, and only then.
func TestWakeWhenDoneEndsAWaitWithItsContext(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	ctx, cancel := context.WithCancel(context.Background())
	waiting := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		stop := WakeWhenDone(ctx, cond)
		defer stop()
		mu.Lock()
		defer mu.Unlock()
		close(waiting)
		for ctx.Err() == nil {
			cond.Wait()
		}
		done <- ctx.Err()
	}()
	<-waiting
	select {
	case <-done:
		t.Fatal("the wait ended before its context did")
	default:
	}
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(time.Minute):
		t.Fatal("the wait did not end with its context")
	}
}
