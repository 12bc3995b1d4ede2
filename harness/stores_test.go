package harness

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness/stores"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/internal/storeproc"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// TestLoadTargetStores: a target file's stores: block loads, with its
// placeholders in command lines and env values.
func TestLoadTargetStores(t *testing.T) {
	t.Parallel()
	tg, err := loadStdioTarget(t, `
serve: [srv, --redis, "{redis_url}", --cache, "{cache_url}"]
token_var: TOK
env:
  DATABASE_URL: "{postgres_url}"
stores:
  - kind: redis
    tenant_data: true
    owners:
      - keys: "sess:{tenant}:*"
      - keys: "user:{user_id}"
  - kind: redis
    name: cache
    url: redis://10.0.0.5:6379/1
  - kind: postgres
    owners:
      - table: app.sessions
        column: profile
        value: "{profile}"
`)
	require.NoError(t, err)
	require.Len(t, tg.Stores, 3)
	assert.Equal(t, stores.Spec{Kind: stores.Redis, TenantData: true, Owners: []stores.Owner{{Keys: "sess:{tenant}:*"}, {Keys: "user:{user_id}"}}}, tg.Stores[0])
	assert.Equal(t, "cache_url", tg.Stores[1].Placeholder())
	assert.Equal(t, "redis://10.0.0.5:6379/1", tg.Stores[1].URL)
	assert.Equal(t, stores.Owner{Table: "app.sessions", Column: "profile", Value: "{profile}"}, tg.Stores[2].Owners[0])
}

// TestLoadTargetStoresNamesTheField: a bad stores: block is refused, the
// error naming the field.
func TestLoadTargetStoresNamesTheField(t *testing.T) {
	t.Parallel()
	requireLoadFails(t, "stores:\n  - kind: mongo\n", `stores[0].kind: "mongo" is no store kind`)
	requireLoadFails(t, "stores:\n  - kind: redis\n    owners: [{keys: 'sess:*'}]\n", "stores[0].owners[0].keys")
	requireLoadFails(t, "stores:\n  - kind: postgres\n    owners: [{table: t}]\n", "stores[0].owners[0].column: empty")
	requireLoadFails(t, "stores:\n  - kind: redis\n    urll: x\n", "urll")
	requireLoadFails(t, "serve: [srv, '{postgres_url}']\ntoken_var: T\nstores:\n  - kind: redis\n",
		"argument \"{postgres_url}\": {postgres_url} names no store of stores: (declared: {redis_url})")
	requireLoadFails(t, "env: {DB: '{cache_url}'}\n", "env.DB: {cache_url} names no store of stores: (declared: none)")
	_, err := LoadTarget(writeFile(t, `
name: staging
url: http://10.0.0.1:8080
token: t
tenants_file: tenants.json
stores:
  - kind: redis
  - kind: postgres
    url: postgres://app@10.0.0.2:5432/app
`))
	require.Error(t, err)
	assert.ErrorContains(t, err, "stores[0].url: empty, and the target is a running server")
	assert.NotContains(t, err.Error(), "stores[1]")
}

// TestSandboxOwnsTheStores: a sandbox starts the target's stores before
// any target process, hands their URLs to its command lines (hooks
// included) and env values, and stops them when it closes (the server's pid gone).
func TestSandboxOwnsTheStores(t *testing.T) {
	t.Parallel()
	if err := storeproc.Available(storeproc.Redis); err != nil {
		t.Skipf("%v (.ci/run installs it)", err)
	}
	tg := echoTarget("sh", "-c", `redis-cli -u "$STORE" ping >&2 && echo "$AGENTD_HOME/profiles"`)
	tg.Env = map[string]string{"STORE": "{redis_url}"}
	tg.Stores = []stores.Spec{{Kind: stores.Redis}}
	ctx := context.Background()
	box, err := NewSandbox(ctx, t.TempDir(), tg, SandboxOptions{Tenants: tenants.Options{Names: []string{"default"}, NoProviders: true}})
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			_ = box.Close()
		}
	}()
	sts := box.Stores()
	require.Len(t, sts, 1)
	url := sts[0].URL
	require.True(t, strings.HasPrefix(url, "redis://127.0.0.1:"), url)
	assert.Equal(t, map[string]string{"redis_url": url}, box.StoreVars())
	out, err := box.RunCommand(ctx, "show", []string{"sh", "-c", `echo "arg={redis_url} env=$STORE"`}, nil)
	require.NoError(t, err)
	assert.Equal(t, "arg="+url+" env="+url, strings.TrimSpace(out))

	out, err = box.HookRunner()(ctx, "profiles.create", map[string]any{}, []string{"echo", "{redis_url}"}, nil)
	require.NoError(t, err)
	assert.Equal(t, url, strings.TrimSpace(out), "a hook's argv gets the stores' URLs too")

	o, err := redis.ParseURL(url)
	require.NoError(t, err)
	c := redis.NewClient(o)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	c.Close()

	pid := sts[0].Pid()
	require.True(t, procgroup.Alive(pid))
	closed = true
	require.NoError(t, box.Close())
	assert.False(t, procgroup.Alive(pid), "the store's server outlived the sandbox")
	assert.Empty(t, procgroup.GroupMembers(pid))
}
