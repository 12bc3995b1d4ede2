package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// ErrShareFull: a tenant has its cluster-wide share of turns in flight.
var ErrShareFull = errors.New("the tenant's turns in flight over every replica are at their bound")

// Acquire takes one of profile's turns in flight over every replica (a
// field per replica in agentd:<profile>:inflight), or ErrShareFull when
// ProfileTurns are taken. release gives it back (safe to call twice; it
// outlives ctx).
func (c *Cluster) Acquire(ctx context.Context, profile string) (release func(), err error) {
	if c.opts.ProfileTurns <= 0 {
		return func() {}, nil
	}
	k := c.key(profile, "inflight")
	if _, err := c.kv.HIncrBy(ctx, k, c.opts.Replica, 1); err != nil {
		return nil, fmt.Errorf("take a turn share of profile %q: %w", profile, err)
	}
	var once bool
	release = func() {
		if once {
			return
		}
		once = true
		rctx := context.WithoutCancel(ctx)
		if _, err := c.kv.HIncrBy(rctx, k, c.opts.Replica, -1); err != nil {
			c.opts.Log.Warn("cluster: give back a turn share", "profile", profile, "err", err)
		}
	}
	total, err := c.InFlight(ctx, profile)
	if err != nil {
		release()
		return nil, err
	}
	if total > c.opts.ProfileTurns {
		release()
		return nil, fmt.Errorf("%w: profile %q has %d of %d", ErrShareFull, profile, total-1, c.opts.ProfileTurns)
	}
	return release, nil
}

// InFlight is profile's turns in flight over every replica.
func (c *Cluster) InFlight(ctx context.Context, profile string) (int, error) {
	vals, err := c.kv.HVals(ctx, c.key(profile, "inflight"))
	if err != nil {
		return 0, fmt.Errorf("read the turn shares of profile %q: %w", profile, err)
	}
	total := 0
	for _, v := range vals {
		n, _ := strconv.Atoi(v)
		total += max(n, 0)
	}
	return total, nil
}

// forgetShares drops what this replica held of profile's shares (a
// replica that starts holds none, whatever a crashed one left).
func (c *Cluster) forgetShares(ctx context.Context, profile string) error {
	return c.kv.HDel(ctx, c.key(profile, "inflight"), c.opts.Replica)
}
