package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/scenarios"
)

// TestTargetAgentdCluster: --target agentd-cluster is the embedded agentd
// (this program re-executed) as three replicas over the stores the
// harness starts; its self-test seeds the embedded agentd's faults, as
// for any target other than agentd, and agentd's cluster faults, which the
// self-test runs in the embedded agentd's cluster (the plain agentd's
// self-test seeds none of those: its user may have no stores installed).
func TestTargetAgentdCluster(t *testing.T) {
	t.Parallel()
	tg, err := loadTarget("agentd-cluster")
	require.NoError(t, err)
	require.NoError(t, tg.Validate())
	assert.Equal(t, "agentd-cluster", tg.Name)
	assert.Equal(t, harness.AgentdClusterReplicas, tg.ReplicaCount())
	assert.Len(t, tg.Stores, 2)
	assert.Equal(t, embeddedAgentd().Serve[0], tg.Serve[0], "the embedded agentd, not one on PATH")
	o, err := parseCertify([]string{"--target", "agentd-cluster"})
	require.NoError(t, err)
	opts := o.options(t.TempDir(), nil, nil, nil)
	require.NotNil(t, opts.SelfTestTarget)
	assert.Equal(t, "agentd", opts.SelfTestTarget.Name)
	names := map[string]bool{}
	for _, f := range opts.Faults {
		names[f.Name] = true
	}
	for _, f := range scenarios.ClusterFaults() {
		assert.True(t, names[f.Name], "agentd-cluster's self-test seeds %s", f.Name)
		spec, err := scenarios.Default().Get(f.Scenario)
		require.NoError(t, err)
		st := scenarios.SelfTestTarget(spec, *opts.SelfTestTarget)
		assert.Equal(t, harness.AgentdClusterReplicas, st.ReplicaCount(), "%s runs in agentd's cluster", f.Name)
		assert.NotEmpty(t, st.Stores, "%s runs over stores", f.Name)
	}
	one, err := parseCertify(nil)
	require.NoError(t, err)
	for _, f := range one.options(t.TempDir(), nil, nil, nil).Faults {
		assert.False(t, f.Cluster(), "the plain agentd's self-test seeds no cluster fault (%s)", f.Name)
	}
	_, err = parseCertify([]string{"--faults", "^events-unscoped$"})
	require.Error(t, err, "a cluster fault is no fault of the plain agentd's self-test")
	_, err = parseCertify([]string{"--target", "agentd-cluster", "--faults", "^events-unscoped$"})
	require.NoError(t, err)
}
