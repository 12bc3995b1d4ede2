package scenarios

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/stores"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/internal/storeproc"
	"github.com/tenantcanary/tenantcanary/invariants"
)

// TestStoresAreScannedAfterEveryPhase: a target that declares a Redis
// store gets one started for its run, and the checks after a phase scan
// it: a key alpha owns holding beta's provider key (what a leaky server
// would have written there) is a store finding naming the key, each
// tenant's own canary in its key passes the store's control, and the
// store's server is gone once the run ends.
func TestStoresAreScannedAfterEveryPhase(t *testing.T) {
	t.Parallel()
	if err := storeproc.Available(storeproc.Redis); err != nil {
		t.Skipf("%v (.ci/run installs it)", err)
	}
	target := agentdTarget()
	target.Stores = []stores.Spec{{Kind: stores.Redis, TenantData: true, Owners: []stores.Owner{{Keys: "cache:{tenant}:*"}}}}
	pid := 0
	var names []string
	spec := Spec{ID: "stores-planted", Purpose: "a leaky server's Redis keys, planted", Backends: []harness.Backend{harness.BackendStdio},
		Snapshots: perTenant(0), Timeout: MaxTimeout,
		Phases: []Phase{{Name: "plant", Run: func(e *Env) {
			st := e.Box.Stores()
			require.Len(e.T, st, 1)
			pid = st[0].Pid()
			o, err := redis.ParseURL(st[0].URL)
			require.NoError(e.T, err)
			c := redis.NewClient(o)
			defer c.Close()
			ctx := context.Background()
			alpha, beta := e.Box.Set.Tenants[1], e.Box.Set.Tenants[2]
			for _, tn := range e.Box.Set.Tenants {
				names = append(names, tn.Name)
				require.NoError(e.T, c.Set(ctx, "cache:"+tn.Name+":own", tn.Model(), 0).Err())
			}
			require.NoError(e.T, c.HSet(ctx, "cache:"+alpha.Name+":reply", "body", beta.ProviderKey()).Err())
		}}}}
	var rep *Report
	out := harness.RunStandalone(context.Background(), t.Name(), t.TempDir(), false, func(rt harness.T) {
		rep = RunScenario(rt, spec, Config{Target: target, Tenants: 3})
	})
	require.NotNil(t, rep, strings.Join(out.Log, "\n"))
	require.True(t, out.Failed, "a planted leak fails the run")
	var store []invariants.Finding
	controls := map[string]bool{}
	for _, p := range rep.Phases {
		for _, f := range p.Findings {
			if f.Invariant == invariants.TenantStore {
				store = append(store, f)
			}
		}
		for _, c := range p.Controls {
			if strings.HasPrefix(c.Name, "own canary in the redis store") {
				controls[c.Tenant] = c.Passed
			}
		}
	}
	require.Len(t, store, 1, "findings: %v", rep.Findings())
	require.Len(t, names, 3)
	alpha, beta := names[1], names[2]
	assert.Equal(t, alpha, store[0].Tenant)
	assert.Equal(t, beta, store[0].Owner)
	assert.Contains(t, store[0].String(), `key "cache:`+alpha+`:reply" hash field "body"`)
	assert.Equal(t, map[string]bool{names[0]: true, alpha: true, beta: true}, controls)
	require.NotZero(t, pid)
	assert.False(t, procgroup.Alive(pid), "the run's redis-server outlived it")
}

// TestStoreControlWaitsForTheTarget: a store that keeps tenant data, in a
// scenario whose phase ends before any backend of the target ran (as one
// that skips does), has no failed control: the target put nothing there
// yet.
func TestStoreControlWaitsForTheTarget(t *testing.T) {
	t.Parallel()
	if err := storeproc.Available(storeproc.Redis); err != nil {
		t.Skipf("%v (.ci/run installs it)", err)
	}
	target := agentdTarget()
	target.Stores = []stores.Spec{{Kind: stores.Redis, TenantData: true, Owners: []stores.Owner{{Keys: "cache:{tenant}:*"}}}}
	spec := Spec{ID: "stores-untouched", Purpose: "a phase that starts no backend", Backends: []harness.Backend{harness.BackendStdio},
		Snapshots: perTenant(0), Timeout: MaxTimeout,
		Phases: []Phase{{Name: "nothing", Run: func(e *Env) {}}}}
	var rep *Report
	out := harness.RunStandalone(context.Background(), t.Name(), t.TempDir(), false, func(rt harness.T) {
		rep = RunScenario(rt, spec, Config{Target: target, Tenants: 3})
	})
	require.NotNil(t, rep, strings.Join(out.Log, "\n"))
	assert.False(t, out.Failed, "%v", rep.Findings())
	assert.Empty(t, rep.Findings())
}
