package cluster

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
)

// Route is where a stored session lives: the replica that opened it last,
// and the profile it belongs to.
type Route struct {
	Replica string `json:"replica"`
	Profile string `json:"profile"`
}

// routeKey is the routing entry of profile's stored session: the
// profile's own, or under the resume-wrong-profile fault one namespace
// for every tenant's sessions, keyed by the stored id alone.
func (c *Cluster) routeKey(profile, stored string) string {
	if c.opts.Faults.Has(faults.ResumeWrongProfile) {
		return c.prefix + "route:" + stored // the bug: no tenant in the key
	}
	return c.key(profile, "route", stored)
}

// Claim records that this replica holds profile's stored session live,
// and returns the replica that held it before ("" for none, or this one).
func (c *Cluster) Claim(ctx context.Context, profile, stored string) (previous string, err error) {
	k := c.routeKey(profile, stored)
	if v, ok, err := c.kv.Get(ctx, k); err == nil && ok {
		var r Route
		if json.Unmarshal([]byte(v), &r) == nil && r.Replica != c.opts.Replica {
			previous = r.Replica
		}
	}
	b, _ := json.Marshal(Route{Replica: c.opts.Replica, Profile: profile})
	if err := c.kv.Set(ctx, k, string(b), c.opts.RouteTTL); err != nil {
		return "", fmt.Errorf("route session %q of profile %q: %w", stored, profile, err)
	}
	return previous, nil
}

// ResumeProfile is the profile a session resumed by a caller of profile
// opens under: the caller's own. Under the resume-wrong-profile fault it
// is whatever profile the session's routing entry (or else its row,
// found by id alone) names, so a session of another tenant resumes under
// that tenant's profile for the caller.
func (c *Cluster) ResumeProfile(ctx context.Context, profile, stored string) string {
	if !c.opts.Faults.Has(faults.ResumeWrongProfile) {
		return profile
	}
	if v, ok, err := c.kv.Get(ctx, c.routeKey(profile, stored)); err == nil && ok {
		var r Route
		if json.Unmarshal([]byte(v), &r) == nil && r.Profile != "" {
			return r.Profile // the bug: the entry's profile, not the caller's
		}
	}
	if owner, err := c.pg.SessionProfile(ctx, stored); err == nil {
		return owner // the bug: the row's profile, not the caller's
	}
	return profile
}
