package stores

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// TestRedisScanIsOwnerAware plants canaries in a real Redis, in every type
// of value, in key names and in two logical databases: a key alpha owns
// holding beta's canary is a store finding (hash, list, stream, set, zset,
// a key's name, base64 of gzip), alpha's own canary in its key is none, a
// key nobody owns holding beta's secret is shared_place (one holding a
// non-secret canary is none), and the control sees alpha's and beta's
// canaries but not gamma's, who stored nothing.
func TestRedisScanIsOwnerAware(t *testing.T) {
	t.Parallel()
	ts := newTenants(t)
	alpha, beta := ts[0], ts[1]
	st := startStore(t, Spec{Kind: Redis, TenantData: true, Owners: []Owner{{Keys: "t:{tenant}:*"}, {Keys: "p:{profile}"}}})
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: redisAddr(t, st.URL)})
	defer c.Close()
	c2 := redis.NewClient(&redis.Options{Addr: redisAddr(t, st.URL), DB: 2})
	defer c2.Close()

	require.NoError(t, c.Set(ctx, "t:alpha:own", alpha.ProviderKey(), 0).Err())
	require.NoError(t, c.HSet(ctx, "t:alpha:hash", "note", "remember "+beta.Value(tenants.Memory)).Err())
	require.NoError(t, c.RPush(ctx, "t:alpha:list", "x", gzipB64(t, beta.ProviderKey())).Err())
	require.NoError(t, c.SAdd(ctx, "t:alpha:set", beta.Value(tenants.Soul)).Err())
	require.NoError(t, c.ZAdd(ctx, "t:alpha:zset", redis.Z{Score: 1, Member: beta.Value(tenants.Workdir)}).Err())
	require.NoError(t, c.Set(ctx, "t:beta:"+alpha.Model(), "x", 0).Err())
	require.NoError(t, c.Set(ctx, "cache:1", beta.ProviderKey(), 0).Err())
	require.NoError(t, c.Set(ctx, "cache:2", beta.Model(), 0).Err())
	require.NoError(t, c2.XAdd(ctx, &redis.XAddArgs{Stream: "t:alpha:events", Values: map[string]any{"msg": beta.Value(tenants.EnvMarker)}}).Err())
	require.NoError(t, c2.HSet(ctx, "p:"+beta.Profile(), "mine", beta.APIServerKey()).Err())

	res := st.Scan(ctx, scanOf(t, ts))
	t.Log(invariants.Format(res.Findings))
	store := findingsOf(res.Findings, invariants.TenantStore)
	for _, want := range [][]string{
		{"store: alpha", `key "t:alpha:hash" hash field "note"`, "beta's memory"},
		{"store: alpha", `key "t:alpha:list" list element 1 -> base64@0 -> gzip`, "beta's provider_key"},
		{"store: alpha", `key "t:alpha:set" set element 0`, "beta's soul"},
		{"store: alpha", `key "t:alpha:zset" zset element 0`, "beta's workdir"},
		{"store: beta", `key "t:beta:` + alpha.Model() + `" (its name)`, "alpha's model"},
		{"store: alpha", "/2 key \"t:alpha:events\" stream entry", `field "msg"`, "beta's env_marker"},
	} {
		assert.True(t, anyHas(store, want...), "no store finding with %q in:\n%s", want, invariants.Format(res.Findings))
	}
	assert.False(t, anyHas(store, "t:alpha:own"), "alpha's own key in alpha's key is no finding")
	assert.False(t, anyHas(store, "p:"+beta.Profile()), "beta's own secret in the key its profile owns is no finding")
	shared := findingsOf(res.Findings, invariants.SharedPlace)
	assert.True(t, anyHas(shared, `key "cache:1"`, "beta's provider_key"), "beta's secret in a shared key: %s", invariants.Format(res.Findings))
	assert.False(t, anyHas(shared, "cache:2"), "a non-secret canary in a shared key is no finding")
	assert.Empty(t, findingsOf(res.Findings, invariants.Harness))
	assert.EqualValues(t, 10, res.Keys)

	controls := map[string]Control{}
	for _, c := range res.Controls {
		controls[c.Tenant] = c
	}
	require.Len(t, controls, 3)
	assert.True(t, controls["alpha"].Passed && controls["beta"].Passed, "%+v", res.Controls)
	assert.True(t, controls["gamma"].Ran)
	assert.False(t, controls["gamma"].Passed, "gamma stored nothing: its control cannot pass")
	assert.Contains(t, controls["gamma"].Detail, "none of gamma's canaries")
}

// TestAStoreThatCannotBeReadSaysSo: a store that does not answer is a
// harness finding, and its controls did not run (never a pass).
func TestAStoreThatCannotBeReadSaysSo(t *testing.T) {
	t.Parallel()
	ts := newTenants(t)
	st := startStore(t, Spec{Kind: Redis})
	down := &Store{Spec: Spec{Kind: Redis, TenantData: true}, URL: st.URL}
	require.NoError(t, st.srv.Stop())
	res := down.Scan(context.Background(), scanOf(t, ts))
	require.Len(t, findingsOf(res.Findings, invariants.Harness), 1)
	assert.Contains(t, res.Findings[0].Detail, "redis store not scanned")
	require.Len(t, res.Controls, 3)
	for _, c := range res.Controls {
		assert.False(t, c.Ran || c.Passed, "%+v", c)
		assert.Contains(t, c.Detail, "could not run")
	}
}

// TestGlobsAreRedisGlobs: an owner's key glob reads as Redis reads one,
// its tenant value literally.
func TestGlobsAreRedisGlobs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		glob, key string
		want      bool
	}{
		{"s:{tenant}:*", "s:a.b:x/y", true},
		{"s:{tenant}:*", "s:aXb:x", false}, // the value's dot is no wildcard
		{"s:{tenant}", "s:a.b", true},
		{"s:{tenant}", "s:a.b:x", false},
		{"s?[0-9]:{tenant}", "sx7:a.b", true},
		{"s?[^0-9]:{tenant}", "sx7:a.b", false},
		{`s\*:{tenant}`, "s*:a.b", true},
		{`s\*:{tenant}`, "sx:a.b", false},
		{"{tenant}{x}", "a.b{x}", true},
	} {
		re, err := globRE(c.glob, map[string]string{"tenant": "a.b"})
		require.NoError(t, err, c.glob)
		assert.Equal(t, c.want, re.MatchString(c.key), "%s against %s", c.glob, c.key)
	}
	_, err := globRE("s:[abc", nil)
	assert.Error(t, err)
}

// TestTheLongestOwnerWins: when one tenant's name begins another's, a key
// is its longest owner's.
func TestTheLongestOwnerWins(t *testing.T) {
	t.Parallel()
	rules, err := keyOwners([]Owner{{Keys: "s:{tenant}*"}}, []Tenant{{Name: "ab", Vars: map[string]string{"tenant": "ab"}}, {Name: "abc", Vars: map[string]string{"tenant": "abc"}}})
	require.NoError(t, err)
	owner, _ := ownerOfKey(rules, "s:abc:1")
	assert.Equal(t, "abc", owner)
	owner, _ = ownerOfKey(rules, "s:abd:1")
	assert.Equal(t, "ab", owner)
	owner, _ = ownerOfKey(rules, "q:abc")
	assert.Empty(t, owner)
}

func redisAddr(t testing.TB, url string) string {
	t.Helper()
	o, err := redis.ParseURL(url)
	require.NoError(t, err)
	return o.Addr
}
