package harness

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness/slowproxy"
	"github.com/tenantcanary/tenantcanary/harness/stores"
	"github.com/tenantcanary/tenantcanary/internal/storeproc"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// TestSandboxProxiesTheStores: with StoreProxies the target is handed the
// proxy's address in its store URL (command lines and env), its commands
// pass the proxy (delayed as set, counted), the store's own URL stays
// the harness's for scans, and Close stops the proxy with the store.
func TestSandboxProxiesTheStores(t *testing.T) {
	t.Parallel()
	if err := storeproc.Available(storeproc.Redis); err != nil {
		t.Skipf("%v (.ci/run installs it)", err)
	}
	tg := echoTarget("sh", "-c", `redis-cli -u "$STORE" ping >&2 && echo "$AGENTD_HOME/profiles"`)
	tg.Env = map[string]string{"STORE": "{redis_url}"}
	tg.Stores = []stores.Spec{{Kind: stores.Redis}}
	ctx := context.Background()
	box, err := NewSandbox(ctx, t.TempDir(), tg, SandboxOptions{Tenants: tenants.Options{Names: []string{"default"}, NoProviders: true},
		StoreProxies: &slowproxy.Options{}})
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			_ = box.Close()
		}
	}()
	st := box.Stores()[0]
	p := st.Proxy()
	require.NotNil(t, p)
	proxied := st.TargetURL()
	assert.Equal(t, "redis://"+p.Addr()+"/0", proxied)
	assert.NotEqual(t, st.URL, proxied, "the harness's own URL is the store's")
	assert.Equal(t, map[string]string{"redis_url": proxied}, box.StoreVars())
	out, err := box.RunCommand(ctx, "show", []string{"sh", "-c", `echo "arg={redis_url} env=$STORE"`}, nil)
	require.NoError(t, err)
	assert.Equal(t, "arg="+proxied+" env="+proxied, strings.TrimSpace(out))

	p.SetDelay(slowproxy.Both, 50*time.Millisecond, 0)
	o, err := redis.ParseURL(proxied)
	require.NoError(t, err)
	c := redis.NewClient(o)
	defer c.Close()
	start := time.Now()
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	assert.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond, "the target's commands pass the proxy")
	assert.Positive(t, p.Stats().ChunksUp)
	before := p.Stats().Accepted

	closed = true
	require.NoError(t, box.Close())
	assert.Error(t, c.Ping(ctx).Err(), "the proxy is gone with the sandbox")
	assert.Equal(t, before, p.Stats().Accepted)
}
