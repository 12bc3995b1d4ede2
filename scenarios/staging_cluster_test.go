package scenarios

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

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
	for _, k := range []storeproc.Kind{storeproc.Postgres, storeproc.Redis} {
		ctx, cancel := context.WithTimeout(t.Context(), 2*storeproc.ReadyWithin)
		s, err := storeproc.Start(ctx, k, t.TempDir())
		cancel()
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, s.Stop()) })
		urls[k] = s.URL
	}
	port, err := harness.FreePort()
	require.NoError(t, err)
	env := "AGENTD_POSTGRES_URL='" + urls[storeproc.Postgres] + "'\nAGENTD_REDIS_URL='" + urls[storeproc.Redis] + "'\nREPLICA_PORTS=" + port + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(st.dir, "cluster.env"), []byte(env), 0o644))
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

// A staging cluster, two agentd replicas over PostgreSQL and Redis reached
// only over their ports and ssh: the replicas scenario spreads every
// tenant over both replicas and passes, the stores are scanned; and two
// of the cluster faults the self-test seeds are caught through it (a
// tenant's events on every tenant's channel; a session resumed on
// another replica under the profile its row names).
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

	for _, f := range ClusterFaults() {
		if f.Name != "events-unscoped" && f.Name != "resume-wrong-profile" {
			continue
		}
		st.seedFault(t, f.Name)
		reps, err := RunCatalog(t.Context(), Default(), Config{Target: tg, WorkDir: t.TempDir(), Run: "^" + regexp.QuoteMeta(f.Scenario) + "$"})
		require.NoError(t, err)
		require.Len(t, reps, 1)
		assert.True(t, found(&reps[0], f.Expect), "%s: %s over ssh found no %s finding: %s\n%s", f.Name, f.Scenario, f.Expect, reps[0].Result, strings.Join(reps[0].Log, "\n"))
	}
	st.seedFault(t, "")
}
