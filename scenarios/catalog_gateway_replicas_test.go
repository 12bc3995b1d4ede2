package scenarios

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
)

// testgwNodes is the test gateway run as two nodes over its one data
// folder, with leak switched on ("" for none).
func testgwNodes(t *testing.T, leak string) harness.Target {
	t.Helper()
	tg := testgwTarget(t, leak)
	tg.Replicas = 2
	require.NoError(t, tg.Validate())
	require.True(t, tg.ReplicatesGateway())
	return tg
}

// TestGatewayReplicasOnTestgw certifies the clean test gateway as two
// nodes: every control held, the revocation's and the identical
// requests' included, and both nodes served.
func TestGatewayReplicasOnTestgw(t *testing.T) {
	t.Parallel()
	spec, err := Default().Get("gateway-replicas")
	require.NoError(t, err)
	rep := runOne(t, spec, testgwNodes(t, ""))
	names := passesWithControls(t, rep)
	for _, c := range []string{
		"own key answered by own provider on every node",
		"own model in own model list on every node",
		"own answer to the identical request on every node",
		"own key still served on every node after a neighbour was disabled",
	} {
		assert.True(t, names[c], "control %q ran: %v", c, names)
	}
}

// TestGatewayReplicasCatchTestgwNodeLeaks is the positive control of each
// of gateway-replicas' checks: the test gateway as two nodes, made to
// keep a tenant's status in each node's memory (a tenant disabled
// through node 1 is served by node 2) or to answer from a response cache
// keyed on the prompt alone.
func TestGatewayReplicasCatchTestgwNodeLeaks(t *testing.T) {
	t.Parallel()
	spec, err := Default().Get("gateway-replicas")
	require.NoError(t, err)
	cases := []struct {
		leak   string
		want   invariants.Invariant
		detail string
	}{
		{"node-cache", invariants.RevokedCredential, "was accepted on node 2 right after the tenant was disabled through node 1"},
		{"prompt-cache", invariants.Text, ""},
	}
	for _, c := range cases {
		t.Run(c.leak, func(t *testing.T) {
			t.Parallel()
			rep := runOne(t, spec, testgwNodes(t, c.leak))
			assert.Equal(t, Leak, rep.Result, "%v", rep.Log)
			assert.Contains(t, findingText(t, rep, c.want), c.detail)
		})
	}
}

// TestGatewayReplicasNeedsGatewayNodes: the scenario is skipped, with the
// reason, on a gateway that runs once and on a target whose replicas are
// its serve processes.
func TestGatewayReplicasNeedsGatewayNodes(t *testing.T) {
	t.Parallel()
	spec, err := Default().Get("gateway-replicas")
	require.NoError(t, err)
	one := testgwTarget(t, "")
	assert.Contains(t, spec.unmet(one), "replicas: 2 or more of the gateway")
	cluster := harness.AgentdClusterTarget(agentdBin)
	assert.Contains(t, spec.unmet(cluster), "this target's replicas, if any, are its serve processes")
}
