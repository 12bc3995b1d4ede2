package server

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/rpc"
)

// boundConn is a connection a tenant credential opened.
type boundConn struct {
	*memConn
	tenant, credential string
}

func (c *boundConn) Tenant() string     { return c.tenant }
func (c *boundConn) Credential() string { return c.credential }

func TestTenantConnectionsReachOnlyTheirOwnProfile(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	bp, err := f.homes.Get("b")
	require.NoError(t, err)
	require.NoError(t, bp.SetEnv(TenantKeyEnv, "key-of-b"))
	lp, err := f.homes.Get("")
	require.NoError(t, err)
	require.NoError(t, lp.SetEnv(TenantKeyEnv, "key-of-launch"))

	name, ok := f.srv.TenantOf("key-of-b")
	require.True(t, ok)
	require.Equal(t, "b", name)
	_, ok = f.srv.TenantOf("key-of-nobody")
	require.False(t, ok, "an unknown credential opens nothing")

	b := &boundConn{memConn: newConn("b"), tenant: "b", credential: "key-of-b"}
	op := newConn("op")

	// Its own profile, named or not.
	res := f.callBound(b, "session.create", map[string]any{})
	require.Equal(t, 0, code(res))
	require.Equal(t, "b", res["result"].(map[string]any)["info"].(map[string]any)["profile_name"])
	require.Equal(t, 0, code(f.callBound(b, "cron.list", map[string]any{"profile": "b"})))

	// Never another's: every method that names a profile, and the
	// operator's methods.
	for _, c := range []struct {
		method string
		params map[string]any
	}{
		{"session.create", map[string]any{"profile": profile.LaunchName}},
		{"session.resume", map[string]any{"session_id": "x", "profile": profile.LaunchName}},
		{"config.set", map[string]any{"profile": profile.LaunchName, "key": "prompt", "value": "p"}},
		{"model.save_key", map[string]any{"profile": profile.LaunchName, "slug": "x", "api_key": "k"}},
		{"cron.create", map[string]any{"profile": profile.LaunchName, "prompt": "p", "every": "every 1h"}},
		{"cron.list", map[string]any{"profile": profile.LaunchName}},
		{"cron.trigger", map[string]any{"profile": profile.LaunchName, "id": "j"}},
		{"profiles.create", map[string]any{"name": "c"}},
		{"profiles.delete", map[string]any{"name": "b"}},
	} {
		require.Equal(t, rpc.CodeForbidden, code(f.callBound(b, c.method, c.params)), "%s %v", c.method, c.params)
	}
	list := f.callBound(b, "profiles.list", map[string]any{})["result"].(map[string]any)["profiles"]
	require.Equal(t, []any{"b"}, list, "a tenant lists only its own profile")

	// A stored session of the launch profile is not found from b's.
	stored := f.call(op, "session.create", map[string]any{})["result"].(map[string]any)["stored_session_id"].(string)
	require.Equal(t, rpc.CodeUnknownSession, code(f.callBound(b, "session.resume", map[string]any{"session_id": stored})))

	// The operator keeps full access.
	require.Equal(t, 0, code(f.call(op, "session.create", map[string]any{"profile": "b"})))
	require.Equal(t, 0, code(f.call(op, "profiles.create", map[string]any{"name": "c"})))

	// A rotated key (or a profile deleted and made again) ends the old
	// credential's reach.
	require.NoError(t, bp.SetEnv(TenantKeyEnv, "new-key-of-b"))
	require.Equal(t, rpc.CodeForbidden, code(f.callBound(b, "session.create", map[string]any{})))
}

// callBound is fixture.call from a tenant-bound connection.
func (f *fixture) callBound(c *boundConn, method string, params any) map[string]any {
	f.t.Helper()
	return f.callOn(c, c.memConn, method, params)
}
