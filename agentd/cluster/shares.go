package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrShareFull: a tenant has its cluster-wide share of turns in flight.
var ErrShareFull = errors.New("the tenant's turns in flight over every replica are at their bound")

// ShareLease is how long one turn holds its share at most: a replica that
// dies mid-turn gives its shares back this late.
const ShareLease = 15 * time.Minute

// Acquire takes one of profile's turns in flight over every replica (a
// member of the sorted set agentd:<profile>:inflight, named for this
// replica and expiring after ShareLease), or ErrShareFull when
// ProfileTurns are taken. release gives it back (safe to call twice, from
// any goroutine; it outlives ctx).
func (c *Cluster) Acquire(ctx context.Context, profile string) (release func(), err error) {
	if c.opts.ProfileTurns <= 0 {
		return func() {}, nil
	}
	k := c.key(profile, "inflight")
	var id [8]byte
	_, _ = rand.Read(id[:])
	member := c.opts.Replica + "/" + hex.EncodeToString(id[:])
	n, err := c.kv.Hold(ctx, k, member, time.Now().Add(ShareLease))
	if err != nil {
		return nil, fmt.Errorf("take a turn share of profile %q: %w", profile, err)
	}
	release = sync.OnceFunc(func() {
		if err := c.kv.Drop(context.WithoutCancel(ctx), k, member); err != nil {
			c.opts.Log.Warn("cluster: give back a turn share", "profile", profile, "err", err)
		}
	})
	if n > int64(c.opts.ProfileTurns) {
		release()
		return nil, fmt.Errorf("%w: profile %q has %d of %d", ErrShareFull, profile, n-1, c.opts.ProfileTurns)
	}
	return release, nil
}

// InFlight is profile's turns in flight over every replica.
func (c *Cluster) InFlight(ctx context.Context, profile string) (int, error) {
	n, err := c.kv.Count(ctx, c.key(profile, "inflight"))
	if err != nil {
		return 0, fmt.Errorf("read the turn shares of profile %q: %w", profile, err)
	}
	return int(n), nil
}

// shareRetry bounds the wait between two tries of AcquireWait.
const shareRetry = time.Second

// AcquireWait is Acquire that waits while profile's share is full: it
// tries again after 25ms, doubling up to a second, until it gets one or
// ctx ends.
func (c *Cluster) AcquireWait(ctx context.Context, profile string) (release func(), err error) {
	wait := 25 * time.Millisecond
	for {
		release, err := c.Acquire(ctx, profile)
		if !errors.Is(err, ErrShareFull) {
			return release, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (gave up waiting: %w)", err, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, shareRetry)
	}
}
