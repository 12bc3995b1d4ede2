package scenarios

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

// TestReplicasSkipsASingleServer: the embedded agentd runs one serve
// process, so the replicas scenario is skipped there, saying why; its
// cluster variant meets the need, and so does a running server with its
// other replicas' URLs.
func TestReplicasSkipsASingleServer(t *testing.T) {
	t.Parallel()
	spec, err := Default().Get("replicas")
	require.NoError(t, err)
	assert.Contains(t, spec.unmet(agentdTarget()), "needs replicas: 2 or more (the target runs 1 serve process)")
	cluster, ok := harness.AgentdClusterOf(agentdTarget())
	require.True(t, ok)
	assert.Empty(t, spec.unmet(cluster))
	staging := cluster
	staging.Serve, staging.URL = nil, "http://10.0.0.5:8080"
	assert.Contains(t, spec.unmet(staging), "a running server's other replicas (replica_urls)")
	// A staging cluster names its other replicas.
	staging.ReplicaURLs = []string{"http://10.0.0.6:8080"}
	assert.Empty(t, spec.unmet(staging))
}

// TestReplicasScenarioOverAgentdCluster runs the replicas scenario
// against agentd's cluster as the example target file runs it (three
// replicas, caches off): it passes with every control of its phases made
// (none skipped), each replica is a process of its own with its own
// name (AGENTD_REPLICA=r<n> from {replica}) and log, and none outlives
// the run.
func TestReplicasScenarioOverAgentdCluster(t *testing.T) {
	t.Parallel()
	skipWithoutStores(t)
	target, ok := harness.AgentdClusterOf(agentdTarget())
	require.True(t, ok)
	spec := replicasScenario()
	var pids []int
	spec.Phases = append(spec.Phases, Phase{Name: "inspect", Run: func(e *Env) {
		require.Len(e.T, e.Replicas, harness.AgentdClusterReplicas)
		assert.Same(e.T, e.Server, e.Replicas[0], "the first replica is the scenario's server")
		names := map[string]bool{}
		for _, p := range e.Box.Procs() {
			names[p.Name()] = true
		}
		for i, r := range e.Replicas {
			assert.Equal(e.T, i+1, r.Replica)
			pids = append(pids, r.Pid())
			environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", r.Pid()))
			require.NoError(e.T, err)
			assert.Contains(e.T, strings.Split(string(environ), "\x00"), fmt.Sprintf("AGENTD_REPLICA=r%d", i+1))
		}
		assert.True(e.T, names["serve"] && names["serve-2"] && names["serve-3"], "every replica is a process of the sandbox, its log scanned: %v", names)
	}})
	rep := runOne(t, spec, target)
	require.Equal(t, Pass, rep.Result, "%s\n%s", failureOf(rep), strings.Join(rep.Log, "\n"))
	for _, s := range rep.Skipped {
		assert.NotContains(t, s.Reason, "replica", "a check of the scenario was skipped: %s", s.Reason)
		assert.NotContains(t, s.Reason, "identical", "a check of the scenario was skipped: %s", s.Reason)
	}
	require.Len(t, pids, harness.AgentdClusterReplicas)
	for _, pid := range pids {
		assert.False(t, procgroup.Alive(pid), "replica %d outlived the run", pid)
	}
}

// TestSelfTestTargetOfReplicas: a self-test runs the scenarios that need
// replicas against the embedded agentd's cluster with its caches on, and
// every other scenario against the target it was given; four of the
// cluster faults are the replicas scenario's.
func TestSelfTestTargetOfReplicas(t *testing.T) {
	t.Parallel()
	cat := Default()
	rs, err := cat.Get("replicas")
	require.NoError(t, err)
	ps, err := cat.Get("pooled-serve")
	require.NoError(t, err)
	got := SelfTestTarget(rs, agentdTarget())
	assert.Equal(t, "agentd-cluster", got.Name)
	assert.Equal(t, harness.AgentdClusterReplicas, got.ReplicaCount())
	assert.Subset(t, got.Serve, clusterCaches)
	assert.Equal(t, agentdTarget().Serve, SelfTestTarget(ps, agentdTarget()).Serve, "a scenario on one server keeps its target")
	other := agentdTarget()
	other.Name = "myserver"
	assert.Equal(t, "myserver", SelfTestTarget(rs, other).Name, "only agentd has a cluster variant")

	var cluster []string
	for _, f := range ClusterFaults() {
		if f.Scenario == "replicas" {
			cluster = append(cluster, f.Name)
		}
	}
	slices.Sort(cluster)
	assert.Equal(t, []string{"cache-key-no-tenant", "events-unscoped", "resume-wrong-profile", "revocation-local-only"}, cluster)
	already := agentdClusterTarget(t, agentdTarget())
	assert.Equal(t, already.Serve, SelfTestTarget(rs, already).Serve, "a cluster of replicas already is run as it is")
}
