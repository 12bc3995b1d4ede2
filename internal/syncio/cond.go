package syncio

import (
	"context"
	"sync"
)

// WakeWhenDone broadcasts cond (holding cond.L) when ctx ends, so that a
// goroutine in cond.Wait wakes and sees ctx is done. Call stop when the
// wait is over.
//
//	stop := syncio.WakeWhenDone(ctx, c.cond)
//	defer stop()
//	c.mu.Lock()
//	for !ready() && ctx.Err() == nil {
//		c.cond.Wait()
//	}
func WakeWhenDone(ctx context.Context, cond *sync.Cond) (stop func() bool) {
	return context.AfterFunc(ctx, func() {
		cond.L.Lock()
		cond.Broadcast()
		cond.L.Unlock()
	})
}
