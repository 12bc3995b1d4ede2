package cluster

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
)

// The auth cache has two levels: each replica's memory (c.auth) and the
// shared entry in Redis (agentd:<profile>:auth), both kept AuthTTL. A
// check looks in memory, then in Redis, then reads the profile's .env
// (load). A revocation (Revoke) drops the shared entry and every
// replica's memory of it before it returns: the replicas acknowledge it.

// authEntry is a tenant's credential as the auth cache holds it.
type authEntry struct {
	sum     [sha256.Size]byte
	found   bool
	expires time.Time
}

// revocation is what agentd:revocations carries: a profile's name, who
// revoked it, and the list where each replica acknowledges it.
type revocation struct {
	Profile string `json:"profile"`
	Replica string `json:"replica"`
	Ack     string `json:"ack"`
}

// noKey is the shared cache's value for a profile with no credential.
const noKey = "none"

// ackWait bounds how long Revoke waits for the replicas' acknowledgements
// (a replica that died meanwhile never sends one; its memory died with it).
const ackWait = 5 * time.Second

// TenantKey is profile's credential hash (found false: it has none) from
// the auth cache, or else from load (its .env), whose answer the cache
// keeps for AuthTTL. With AuthTTL 0 it is load's answer, every time.
func (c *Cluster) TenantKey(ctx context.Context, profile string, load func() ([sha256.Size]byte, bool, error)) ([sha256.Size]byte, bool, error) {
	ttl := c.opts.AuthTTL
	if ttl <= 0 {
		return load()
	}
	now := time.Now()
	c.mu.Lock()
	e, ok := c.auth[profile]
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.sum, e.found, nil
	}
	k := c.key(profile, "auth")
	if v, ok, err := c.kv.Get(ctx, k); err == nil && ok {
		if e, ok := parseAuth(v); ok {
			e.expires = now.Add(ttl)
			c.remember(profile, e)
			return e.sum, e.found, nil
		}
	}
	sum, found, err := load()
	if err != nil {
		return sum, found, err
	}
	c.remember(profile, authEntry{sum: sum, found: found, expires: now.Add(ttl)})
	v := noKey
	if found {
		v = hex.EncodeToString(sum[:])
	}
	if err := c.kv.Set(ctx, k, v, ttl); err != nil {
		c.opts.Log.Warn("cluster: auth cache", "profile", profile, "err", err)
	}
	return sum, found, nil
}

func parseAuth(v string) (authEntry, bool) {
	if v == noKey {
		return authEntry{}, true
	}
	b, err := hex.DecodeString(v)
	if err != nil || len(b) != sha256.Size {
		return authEntry{}, false
	}
	var e authEntry
	copy(e.sum[:], b)
	e.found = true
	return e, true
}

func (c *Cluster) remember(profile string, e authEntry) {
	c.mu.Lock()
	c.auth[profile] = e
	c.mu.Unlock()
}

func (c *Cluster) forget(profile string) {
	c.mu.Lock()
	delete(c.auth, profile)
	c.mu.Unlock()
}

// Revoke says profile's credential changed (rotated, removed, its profile
// deleted or made anew). Before it returns, the shared entry is gone and
// every replica that heard the revocation on agentd:revocations has
// dropped its memory of the credential and acknowledged it; each then
// ends the connections the old key opened (OnRevoke). Under the
// revocation-local-only fault the revocation stops at this replica: its
// memory and the shared entry go, but the other replicas are never told
// and keep accepting the old key from their memory until it expires.
func (c *Cluster) Revoke(ctx context.Context, profile string) error {
	c.forget(profile)
	if err := c.kv.Del(ctx, c.key(profile, "auth")); err != nil {
		return fmt.Errorf("revoke credential of profile %q: %w", profile, err)
	}
	if c.opts.Faults.Has(faults.RevocationLocalOnly) {
		c.mu.Lock()
		h := c.onRevoke
		c.mu.Unlock()
		if h != nil {
			h(profile) // the bug: this replica alone hears of it
		}
		return nil
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	ack := c.prefix + "revocations:ack:" + hex.EncodeToString(id[:])
	b, _ := json.Marshal(revocation{Profile: profile, Replica: c.opts.Replica, Ack: ack})
	n, err := c.kv.Publish(ctx, c.prefix+"revocations", string(b))
	if err != nil {
		return fmt.Errorf("revoke credential of profile %q: %w", profile, err)
	}
	deadline := time.Now().Add(ackWait)
	for got := int64(0); got < n; got++ {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("revoke credential of profile %q: %d of %d replicas acknowledged within %s", profile, got, n, ackWait)
		}
		_, ok, err := c.kv.Pop(ctx, ack, left)
		if err != nil {
			return fmt.Errorf("revoke credential of profile %q: wait for acknowledgements: %w", profile, err)
		}
		if !ok {
			return fmt.Errorf("revoke credential of profile %q: %d of %d replicas acknowledged within %s", profile, got, n, ackWait)
		}
	}
	_ = c.kv.Del(ctx, ack)
	return nil
}

// revoked handles a revocation heard on agentd:revocations: this
// replica's memory of the credential goes, the revoker is told, then the
// server ends what the old key opened.
func (c *Cluster) revoked(r revocation) {
	c.forget(r.Profile)
	if r.Ack != "" {
		ctx, cancel := context.WithTimeout(context.Background(), ackWait)
		if err := c.kv.Push(ctx, r.Ack, c.opts.Replica, time.Minute); err != nil {
			c.opts.Log.Warn("cluster: acknowledge a revocation", "profile", r.Profile, "err", err)
		}
		cancel()
	}
	c.mu.Lock()
	h := c.onRevoke
	c.mu.Unlock()
	if h != nil {
		h(r.Profile)
	}
}
