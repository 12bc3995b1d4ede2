package scenarios

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/internal/storeproc"
	"github.com/tenantcanary/tenantcanary/invariants"
)

// agentdClusterTarget is the embedded agentd's target in cluster mode, as
// examples/targets/agentd-cluster/target.yaml has it
// (harness.AgentdClusterOf: three replicas; base is the embedded agentd's
// target, its plain or race build), with its response and auth caches on
// (clusterCaches): a Redis and a PostgreSQL started per scenario, scanned
// owner-aware. The tests skip without the stores'
// programs (.ci/run installs them).
func agentdClusterTarget(t *testing.T, base harness.Target) harness.Target {
	t.Helper()
	for _, k := range []storeproc.Kind{storeproc.Redis, storeproc.Postgres} {
		if err := storeproc.Available(k); err != nil {
			t.Skipf("%v (.ci/run installs it)", err)
		}
	}
	tg, ok := harness.AgentdClusterOf(base)
	require.True(t, ok, "the embedded agentd has a cluster variant")
	tg = tg.WithServeArgs(clusterCaches...)
	require.NoError(t, tg.Validate())
	return tg
}

// TestCancellationsNeedStores: against the single agentd, which declares
// no store, the scenario is skipped with the reason.
func TestCancellationsNeedStores(t *testing.T) {
	t.Parallel()
	why := cancellations().unmet(agentdTarget())
	assert.Contains(t, why, "needs shared stores (stores:)")
}

// TestCancellationsClean: agentd in cluster mode, its response cache on,
// passes the scenario: every answered turn carries its own reply
// canary, every round cancelled turns with store commands in flight, and
// the stores were restarted once.
func TestCancellationsClean(t *testing.T) {
	t.Parallel()
	target := agentdClusterTarget(t, agentdRaceTarget())
	rep := RunScenario(t, cancellations(), Config{Target: target, Tenants: 3, Progress: logWriter{t}})
	require.Empty(t, rep.Findings())
	require.False(t, t.Failed())
	for _, p := range rep.Phases {
		for _, c := range p.Controls {
			assert.True(t, c.Passed, "control %s of %s: %s", c.Name, c.Tenant, c.Detail)
		}
	}
	cancelled, inFlight := 0, 0
	var drops int64
	for _, r := range rep.Cancellations {
		cancelled += r.Cancelled
		inFlight += r.InFlight
		drops += r.StoreDrops
	}
	assert.Positive(t, cancelled)
	assert.Positive(t, inFlight, "no cancellation met a store command in flight")
	t.Logf("cancellations: %d cancelled, %d while a store command was in flight, %d store connections dropped mid-command", cancelled, inFlight, drops)
}

// TestCancellationsCatchRate runs the scenario against agentd in cluster
// mode with store-cancel-reply seeded CANCEL_RUNS times (unset: skipped;
// the self-test row runs it once) and reports how many runs caught it (an
// rpc finding: another tenant's answer in a tenant's frames). At 10 runs
// it wants 9. CANCEL_DELAY sets the stores' delay each way (default
// 40ms, the jitter half of it).
//
//	CANCEL_RUNS=10 go test -run TestCancellationsCatchRate -v ./scenarios/
func TestCancellationsCatchRate(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("CANCEL_RUNS"))
	if n <= 0 {
		t.Skip("CANCEL_RUNS is unset: the self-test row (DETECT_FAULTS=store-cancel-reply) runs the faulty scenario once")
	}
	if v := os.Getenv("CANCEL_DELAY"); v != "" {
		// A measurement of the delay's part: the stores at another delay
		// (0: as fast as they are). No parallel test runs while this
		// sequential one does, so the tuning is this test's alone.
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "CANCEL_DELAY")
		saved := cancelTune
		t.Cleanup(func() { cancelTune = saved })
		cancelTune.Delay, cancelTune.Jitter = d, d/2
	}
	target := withEnv(agentdClusterTarget(t, agentdTarget()), FaultEnv("store-cancel-reply"))
	caught := 0
	var lines []string
	for i := range n {
		var rep *Report
		start := time.Now()
		out := harness.RunStandalone(context.Background(), fmt.Sprintf("%s-%d", t.Name(), i), t.TempDir(), false, func(rt harness.T) {
			rep = RunScenario(rt, cancellations(), Config{Target: target, Tenants: 3, stopOn: invariants.RPC, fault: "store-cancel-reply"})
		})
		require.NotNil(t, rep, strings.Join(out.Log, "\n"))
		hit := found(rep, invariants.RPC)
		if hit {
			caught++
		}
		inFlight, cancelled := 0, 0
		for _, r := range rep.Cancellations {
			inFlight += r.InFlight
			cancelled += r.Cancelled
		}
		lines = append(lines, fmt.Sprintf("run %d (seed %d): caught %v in %v; %d rounds, %d cancelled, %d with a store command in flight; %d findings",
			i+1, rep.Seed, hit, time.Since(start).Round(time.Second), len(rep.Cancellations), cancelled, inFlight, len(rep.Findings())))
		t.Log(lines[len(lines)-1])
	}
	t.Logf("store-cancel-reply caught in %d of %d runs of cancellations", caught, n)
	if n >= 10 {
		assert.GreaterOrEqual(t, caught*10, 9*n, "want at least 9 runs in 10")
	}
}

// TestClusterFaultsTable: every row of ClusterFaults names a fault of
// agentd's cluster mode and a scenario of the catalog that needs stores;
// Faults (the single agentd's) holds none of them.
func TestClusterFaultsTable(t *testing.T) {
	t.Parallel()
	require.NoError(t, validateFaults(Default(), ClusterFaults()))
	for _, f := range ClusterFaults() {
		assert.True(t, f.Cluster(), "%s is no cluster fault", f.Name)
		s, err := Default().Get(f.Scenario)
		require.NoError(t, err)
		assert.True(t, slices.Contains(s.Needs, NeedStores) || slices.Contains(s.Needs, NeedReplicas), "%s's scenario %s runs without stores or replicas", f.Name, f.Scenario)
	}
	for _, f := range Faults() {
		assert.False(t, f.Cluster(), "%s needs cluster mode: its row belongs in ClusterFaults", f.Name)
	}
}

// selfTestCluster runs the self-test of cluster faults against agentd in
// cluster mode (agentdClusterTarget): each fault's scenario clean, then
// with the fault, and fails the test for a fault missed or a clean run
// that was not clean.
func selfTestCluster(t *testing.T, faults []Fault) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	res, err := SelfTest(ctx, Default(), Config{Target: agentdClusterTarget(t, agentdTarget()), Tenants: 3, WorkDir: t.TempDir(), Parallel: 2}, faults)
	require.NoError(t, err)
	assertSelfTestCaught(t, res)
}

// TestSelfTestCatchesEveryClusterFault: the self-test of ClusterFaults
// against agentd in cluster mode, each fault's scenario clean and then
// with the fault (TestSelfTestCatchesEverySeededFault is the single
// agentd's). Run by the plain test binary, as that one is.
func TestSelfTestCatchesEveryClusterFault(t *testing.T) {
	t.Parallel()
	if inPlainBinary(t) {
		return
	}
	selfTestCluster(t, ClusterFaults())
}
