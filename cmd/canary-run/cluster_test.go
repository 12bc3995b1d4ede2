package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
)

// TestTargetAgentdCluster: --target agentd-cluster is the embedded agentd
// (this program re-executed) as three replicas over the stores the
// harness starts; its self-test seeds the embedded agentd's faults, as
// for any target other than agentd.
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
}
