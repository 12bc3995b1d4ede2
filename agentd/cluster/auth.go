package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
)

// authEntry is a tenant's credential as the auth cache holds it.
type authEntry struct {
	sum   [sha256.Size]byte
	found bool
}

// revocation is what agentd:revocations carries.
type revocation struct {
	Profile string `json:"profile"`
	Replica string `json:"replica"`
}

// noKey is the shared cache's value for a profile with no credential.
const noKey = "none"

// TenantKey is profile's credential hash (found false: it has none) from
// the shared auth cache in Redis, or else from load (its .env), whose
// answer is kept there for AuthTTL. With AuthTTL 0 it is load's answer,
// every time. There is no cache in the replica's memory: a revocation
// (Revoke) drops the shared entry before it returns, so the next check on
// any replica reads the .env again.
func (c *Cluster) TenantKey(ctx context.Context, profile string, load func() ([sha256.Size]byte, bool, error)) ([sha256.Size]byte, bool, error) {
	ttl := c.opts.AuthTTL
	if ttl <= 0 {
		return load()
	}
	k := key(profile, "auth")
	if v, ok, err := c.kv.Get(ctx, k); err == nil && ok {
		if e, ok := parseAuth(v); ok {
			return e.sum, e.found, nil
		}
	}
	sum, found, err := load()
	if err != nil {
		return sum, found, err
	}
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

// Revoke says profile's credential changed (rotated, removed, its profile
// deleted or made anew): its entry leaves the shared auth cache before
// Revoke returns, and every replica (this one included) is told on
// agentd:revocations, so that each ends its connections the old key
// opened. Under the revocation-local-only fault only this replica acts:
// the shared entry stays, and the other replicas keep accepting the old
// key until it expires.
func (c *Cluster) Revoke(ctx context.Context, profile string) error {
	if c.opts.Faults.Has(faults.RevocationLocalOnly) {
		c.mu.Lock()
		h := c.onRevoke
		c.mu.Unlock()
		if h != nil {
			h(profile) // the bug: this replica alone hears of it
		}
		return nil
	}
	if err := c.kv.Del(ctx, key(profile, "auth")); err != nil {
		return fmt.Errorf("revoke credential of profile %q: %w", profile, err)
	}
	b, _ := json.Marshal(revocation{Profile: profile, Replica: c.opts.Replica})
	if err := c.kv.Publish(ctx, revocationsChannel, string(b)); err != nil {
		return fmt.Errorf("revoke credential of profile %q: %w", profile, err)
	}
	return nil
}
