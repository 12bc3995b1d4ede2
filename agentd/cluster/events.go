package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
)

// Event is a message between replicas about one tenant.
type Event struct {
	Type    string         `json:"type"`    // EventConfigChanged, EventSessionMoved
	Profile string         `json:"profile"` // the tenant it is about
	Replica string         `json:"replica"` // the replica it came from
	Stored  string         `json:"stored,omitempty"`
	Payload map[string]any `json:"payload,omitempty"`
}

// The events replicas send each other.
const (
	// EventConfigChanged: a setting of the profile was written (payload
	// key, value); the profile's sessions on other replicas are told.
	EventConfigChanged = "config.changed"
	// EventSessionMoved: the stored session was resumed on the sending
	// replica; another replica holding it live ends its copy.
	EventSessionMoved = "session.moved"
)

// EventsChannel is the channel of profile's events: its own, or under
// the events-unscoped fault one channel for every tenant.
func (c *Cluster) EventsChannel(profile string) string {
	if c.opts.Faults.Has(faults.EventsUnscoped) {
		return c.prefix + "events" // the bug: no tenant in the name
	}
	return c.key(profile, "events")
}

// OnEvent sets the handler of events from other replicas: channel is the
// one the event came on. Set it before the first Follow.
func (c *Cluster) OnEvent(h func(channel string, ev Event)) {
	c.mu.Lock()
	c.onEvent = h
	c.mu.Unlock()
}

// OnRevoke sets the handler of a revocation announced by any replica
// (this one's included): the profile's credential changed.
func (c *Cluster) OnRevoke(h func(profile string)) {
	c.mu.Lock()
	c.onRevoke = h
	c.mu.Unlock()
}

// Publish sends ev (its Replica set to this one) on its profile's channel.
func (c *Cluster) Publish(ctx context.Context, ev Event) error {
	ev.Replica = c.opts.Replica
	b, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("publish %s of profile %q: %w", ev.Type, ev.Profile, err)
	}
	_, err = c.kv.Publish(ctx, c.EventsChannel(ev.Profile), string(b))
	return err
}

// Follow subscribes this replica to profile's events (once, however many
// of its sessions follow them) and returns once Redis confirmed it; stop
// ends this follower's share.
func (c *Cluster) Follow(ctx context.Context, profile string) (stop func(), err error) {
	ch := c.EventsChannel(profile)
	c.subMu.Lock()
	defer c.subMu.Unlock()
	if c.follows[ch] == 0 {
		if err := c.subscribe(ctx, ch); err != nil {
			return nil, err
		}
	}
	c.follows[ch]++
	return sync.OnceFunc(func() {
		c.subMu.Lock()
		defer c.subMu.Unlock()
		if c.follows[ch]--; c.follows[ch] > 0 {
			return
		}
		delete(c.follows, ch)
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.ps.Unsubscribe(uctx, ch); err != nil {
			c.opts.Log.Warn("cluster: unsubscribe", "channel", ch, "err", err)
		}
	}), nil
}

// subscribe subscribes to ch and waits for Redis's confirmation.
func (c *Cluster) subscribe(ctx context.Context, ch string) error {
	wait := make(chan struct{})
	c.mu.Lock()
	c.ready[ch] = wait
	c.mu.Unlock()
	if err := c.ps.Subscribe(ctx, ch); err != nil {
		return fmt.Errorf("subscribe to %s: %w", ch, err)
	}
	select {
	case <-wait:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("subscribe to %s: no confirmation: %w", ch, ctx.Err())
	}
}

// receive reads the subscription until ctx ends (Close).
func (c *Cluster) receive(ctx context.Context) {
	defer close(c.done)
	for {
		msg, err := c.ps.Receive(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			c.opts.Log.Warn("cluster: redis subscription", "err", err)
			t := time.NewTimer(100 * time.Millisecond) // go-redis resubscribes on the next Receive
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				c.mu.Lock()
				if w, ok := c.ready[m.Channel]; ok {
					close(w)
					delete(c.ready, m.Channel)
				}
				c.mu.Unlock()
			}
		case *redis.Message:
			c.deliver(m.Channel, m.Payload)
		}
	}
}

func (c *Cluster) deliver(channel, payload string) {
	if channel == c.prefix+"revocations" {
		var r revocation
		if json.Unmarshal([]byte(payload), &r) != nil || r.Profile == "" {
			return
		}
		c.revoked(r)
		return
	}
	var ev Event
	if err := json.Unmarshal([]byte(payload), &ev); err != nil {
		c.opts.Log.Warn("cluster: bad event", "channel", channel, "err", err)
		return
	}
	if ev.Replica == c.opts.Replica {
		return // its own: the local sessions were told already
	}
	c.mu.Lock()
	h := c.onEvent
	c.mu.Unlock()
	if h != nil {
		h(channel, ev)
	}
}
