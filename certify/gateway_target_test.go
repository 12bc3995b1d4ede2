package certify

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/tenantcanary/tenantcanary/harness"
)

// TestCertTargetGatewayHasNoAgentBehaviours: a gateway's certificate
// names no agent-only behaviour (unknown_profile); an agent's does.
func TestCertTargetGatewayHasNoAgentBehaviours(t *testing.T) {
	t.Parallel()
	gw := certTarget(harness.Target{Name: "gw", Version: "1", Kind: harness.KindGateway})
	assert.Equal(t, "gw", gw.Name)
	assert.Empty(t, gw.Behaviours)
	agent := certTarget(harness.Target{Name: "a"})
	assert.Contains(t, agent.Behaviours, "unknown_profile")
}
