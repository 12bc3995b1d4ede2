package scenarios

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/internal/storeproc"
)

// startSSHCluster turns st's server into a cluster of two agentd serve
// replicas over a PostgreSQL and a Redis this test starts (on loopback,
// outside the namespace: the replicas reach them as a staging cluster
// reaches its stores), and returns examples/targets/staging-ssh's
// cluster.yaml, filled in.
func startSSHCluster(t *testing.T, st *sshStage) harness.Target {
	t.Helper()
	for _, k := range []storeproc.Kind{storeproc.Postgres, storeproc.Redis} {
		if err := storeproc.Available(k); err != nil {
			t.Skipf("a staging cluster needs %s: %v", k, err)
		}
	}
	urls := map[storeproc.Kind]string{}
	t.Cleanup(func() { st.stores = nil })
	for _, k := range []storeproc.Kind{storeproc.Postgres, storeproc.Redis} {
		ctx, cancel := context.WithTimeout(t.Context(), 2*storeproc.ReadyWithin)
		s, err := storeproc.Start(ctx, k, t.TempDir())
		cancel()
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, s.Stop()) })
		urls[k] = s.URL
		st.stores = append(st.stores, s)
	}
	port, err := harness.FreePort()
	require.NoError(t, err)
	st.cluster = "AGENTD_POSTGRES_URL='" + urls[storeproc.Postgres] + "'\nAGENTD_REDIS_URL='" + urls[storeproc.Redis] + "'\nREPLICA_PORTS=" + port + "\n"
	st.clusterFlags(t, nil)
	path := filepath.Join(st.dir, "cluster.yaml")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	fill := strings.NewReplacer("REPLICA2_PORT", port, "POSTGRES_URL", urls[storeproc.Postgres], "REDIS_URL", urls[storeproc.Redis])
	require.NoError(t, os.WriteFile(path, []byte(fill.Replace(string(data))), 0o644))
	tg, err := harness.LoadTarget(path)
	require.NoError(t, err)
	require.Equal(t, 2, tg.ReplicaCount())
	st.restart(t, tg)
	require.NoError(t, tg.ReplicaHealthy(t.Context(), 2), "the second replica answers")
	return tg
}

// flushStores empties the cluster's Redis: its caches and channels.
func (st *sshStage) flushStores(t *testing.T) {
	t.Helper()
	for _, s := range st.stores {
		if s.Kind != storeproc.Redis {
			continue
		}
		opt, err := redis.ParseURL(s.URL)
		require.NoError(t, err)
		c := redis.NewClient(opt)
		require.NoError(t, c.FlushAll(t.Context()).Err())
		require.NoError(t, c.Close())
	}
}

// clusterFlags writes the cluster's cluster.env with flags as every
// replica's further serve flags (SERVE_FLAGS); the next restart takes it.
func (st *sshStage) clusterFlags(t *testing.T, flags []string) {
	t.Helper()
	env := st.cluster + "SERVE_FLAGS='" + strings.Join(flags, " ") + "'\n"
	require.NoError(t, os.WriteFile(filepath.Join(st.dir, "cluster.env"), []byte(env), 0o644))
}

// A staging cluster, two agentd replicas over PostgreSQL and Redis reached
// only over their ports and ssh: the replicas scenario spreads every
// tenant over both replicas and passes, the stores are scanned; and the
// cluster faults the self-test seeds for replicas are caught through it (a
// tenant's events on every tenant's channel; a session resumed on
// another replica under the profile its row names), and, with the
// replicas' caches on, the two that live in them.
func TestStagingClusterOverSSH(t *testing.T) {
	t.Parallel()
	st := startSSHStage(t)
	tg := startSSHCluster(t, st)

	reps, err := RunCatalog(t.Context(), Default(), Config{Target: tg, WorkDir: t.TempDir(), Run: "^(replicas|pooled-serve)$"})
	require.NoError(t, err)
	require.Len(t, reps, 2)
	for _, r := range reps {
		require.Equal(t, Pass, r.Result, "%s over ssh: %s\n%s", r.ID, r.Reason, strings.Join(r.Log, "\n"))
		stores := false
		for _, p := range r.Phases {
			stores = stores || p.Counts.StoreKeys > 0 || p.Counts.StoreRows > 0
		}
		assert.True(t, stores, "%s scanned the cluster's stores", r.ID)
	}

	// The cluster faults of the replicas scenario, each seeded as the
	// operator would, in the replicas' environment; two live in caches the
	// operator turns on (the self-test's own cluster runs with both on).
	for _, f := range ClusterFaults() {
		if f.Scenario != "replicas" {
			continue
		}
		var flags []string
		if f.Name == "revocation-local-only" || f.Name == "cache-key-no-tenant" {
			flags = clusterCaches
		}
		if only := os.Getenv("TENANTCANARY_STAGING_CLUSTER_FAULTS"); only != "" && !regexp.MustCompile(only).MatchString(f.Name) {
			continue
		}
		st.clusterFlags(t, flags)
		// Each fault starts from empty stores, as the self-test's own
		// cluster does: a cache keeps the keys of the tenants an earlier
		// run planted under the same profile names for its TTL.
		st.flushStores(t)
		st.seedFault(t, f.Name)
		reps, err := RunCatalog(t.Context(), Default(), Config{Target: tg, WorkDir: t.TempDir(), Run: "^" + regexp.QuoteMeta(f.Scenario) + "$"})
		require.NoError(t, err)
		require.Len(t, reps, 1)
		assert.True(t, found(&reps[0], f.Expect), "%s: %s over ssh found no %s finding: %s\n%s", f.Name, f.Scenario, f.Expect, reps[0].Result, strings.Join(reps[0].Log, "\n"))
	}
	st.clusterFlags(t, nil)
	st.seedFault(t, "")
}
