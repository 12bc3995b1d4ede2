package stores

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/internal/storeproc"
)

// TestValidateNamesTheField: every bad spec is refused with the field it
// is in; good ones pass.
func TestValidateNamesTheField(t *testing.T) {
	t.Parallel()
	require.NoError(t, Validate(nil))
	require.NoError(t, Validate([]Spec{
		{Kind: Redis, Owners: []Owner{{Keys: "sess:{tenant}:*"}, {Keys: "u:{user_id}"}}, TenantData: true},
		{Kind: Postgres, URL: "postgres://app:pw@db:5432/app", Owners: []Owner{{Table: "app.sessions", Column: "profile", Value: "{profile}"}}},
		{Kind: Redis, Name: "cache", URL: "redis://cache:6379/1"},
	}))
	for _, c := range []struct {
		spec Spec
		want string
	}{
		{Spec{Kind: "mysql"}, `stores[0].kind: "mysql" is no store kind`},
		{Spec{Kind: Redis, Name: "Cache"}, "stores[0].name:"},
		{Spec{Kind: Redis, URL: "http://x"}, "stores[0].url:"},
		{Spec{Kind: Postgres, URL: "redis://x:1"}, "stores[0].url:"},
		{Spec{Kind: Redis, Owners: []Owner{{}}}, "stores[0].owners[0].keys: empty"},
		{Spec{Kind: Redis, Owners: []Owner{{Keys: "sess:*"}}}, "stores[0].owners[0].keys: \"sess:*\" holds no owner placeholder"},
		{Spec{Kind: Redis, Owners: []Owner{{Keys: "sess:{tenent}"}}}, "stores[0].owners[0].keys: unknown placeholder(s) {tenent}"},
		{Spec{Kind: Redis, Owners: []Owner{{Keys: "sess:[{tenant}"}}}, "stores[0].owners[0].keys: glob"},
		{Spec{Kind: Redis, Owners: []Owner{{Keys: "s:{tenant}", Table: "t"}}}, "stores[0].owners[0]: a redis store's owners give keys"},
		{Spec{Kind: Postgres, Owners: []Owner{{Column: "c"}}}, "stores[0].owners[0].table: empty"},
		{Spec{Kind: Postgres, Owners: []Owner{{Table: "t"}}}, "stores[0].owners[0].column: empty"},
		{Spec{Kind: Postgres, Owners: []Owner{{Table: "a.b.c", Column: "c"}}}, "stores[0].owners[0].table:"},
		{Spec{Kind: Postgres, Owners: []Owner{{Table: "t", Column: "c", Value: "{Tenant}"}}}, "stores[0].owners[0].value: unknown placeholder"},
	} {
		err := Validate([]Spec{c.spec})
		require.Error(t, err, "%+v", c.spec)
		assert.Contains(t, err.Error(), c.want)
	}
	err := Validate([]Spec{{Kind: Redis}, {Kind: Redis}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "stores[1].name: {redis_url} is stores[0]'s too")
	for _, u := range []string{"mysql://u:secret@h:1/x", "postgres://u:secret@h:port/x"} {
		err := Validate([]Spec{{Kind: Postgres, URL: u}})
		require.Error(t, err, u)
		assert.Contains(t, err.Error(), "stores[0].url:")
		assert.NotContains(t, err.Error(), "secret", "an error never shows the store's password")
	}
}

// TestOpenStartsAndStopsOnlyItsOwn: Open starts a store with no URL (a
// real server, its pid gone after Close) and only takes the URL of one
// that gives it; Vars are their placeholders.
func TestOpenStartsAndStopsOnlyItsOwn(t *testing.T) {
	t.Parallel()
	if err := storeproc.Available(storeproc.Redis); err != nil {
		t.Skipf("%v (.ci/run installs it)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	set, err := Open(ctx, []Spec{{Kind: Redis}, {Kind: Redis, Name: "staging", URL: "redis://:pw@10.0.0.1:6379/2"}}, t.TempDir())
	require.NoError(t, err)
	sts := set.Stores()
	require.Len(t, sts, 2)
	require.True(t, sts[0].Started())
	assert.False(t, sts[1].Started())
	assert.Equal(t, "redis://:xxxxx@10.0.0.1:6379/2", sts[1].Name())
	pid := sts[0].Pid()
	require.True(t, procgroup.Alive(pid))
	vars := set.Vars()
	assert.Equal(t, map[string]string{"redis_url": sts[0].URL, "staging_url": "redis://:pw@10.0.0.1:6379/2"}, vars)
	assert.True(t, strings.HasPrefix(vars["redis_url"], "redis://127.0.0.1:"))
	assert.Error(t, sts[1].Restart(ctx), "a store the harness did not start is not its to restart")
	require.NoError(t, set.Close())
	assert.False(t, procgroup.Alive(pid), "redis-server outlived Close")
	assert.Empty(t, procgroup.GroupMembers(pid))
	require.NoError(t, set.Close(), "Close twice")
	var none *Set
	assert.NoError(t, none.Close())
	assert.Empty(t, none.Vars())
}

// TestTenantsOfNamesIDsAsRoutesDo: a provisioner's ids ("user") fill the
// owner rules' {user_id}, as the routes' placeholders do, and a gateway
// tenant's key and bare key fill {key} and {bare_key}; a rule whose
// variable a tenant lacks is left out for it.
func TestTenantsOfNamesIDsAsRoutesDo(t *testing.T) {
	t.Parallel()
	ts := newTenants(t)
	got := TenantsOf(ts, map[string]map[string]string{ts[0].Name: {"user": "7", "key": "sk-abc", "bare_key": "abc", "channel_id": "9"}})
	assert.Equal(t, "7", got[0].Vars["user_id"])
	assert.Equal(t, "7", got[0].Vars["user"])
	assert.Equal(t, "9", got[0].Vars["channel_id"])
	assert.Equal(t, "abc", got[0].Vars["bare_key"])
	assert.NotContains(t, got[0].Vars, "key_id")
	rules, err := keyOwners([]Owner{{Keys: "user_enabled:{user_id}"}, {Keys: "token:{bare_key}"}}, got)
	require.NoError(t, err)
	owner, _ := ownerOfKey(rules, "user_enabled:7")
	assert.Equal(t, ts[0].Name, owner)
	owner, _ = ownerOfKey(rules, "token:abc")
	assert.Equal(t, ts[0].Name, owner)
	owner, _ = ownerOfKey(rules, "user_enabled:8")
	assert.Empty(t, owner)
	require.NoError(t, Validate([]Spec{{Kind: Redis, Owners: []Owner{{Keys: "token:{bare_key}"}, {Keys: "k:{key}"}}}}))
}
