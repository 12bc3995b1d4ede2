package certify

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
)

// TestCertTargetGatewayHasNoAgentBehaviours: a gateway's certificate
// names no agent-only behaviour (unknown_profile); an agent's does.
func TestCertTargetGatewayHasNoAgentBehaviours(t *testing.T) {
	t.Parallel()
	gw := certTarget(harness.Target{Name: "gw", Version: "1", Kind: harness.KindGateway}, 0)
	assert.Equal(t, "gw", gw.Name)
	assert.Empty(t, gw.Behaviours)
	agent := certTarget(harness.Target{Name: "a"}, 0)
	assert.Contains(t, agent.Behaviours, "unknown_profile")
}

// TestCertTargetReportsTheTimes: the certificate names the times the run
// waited on the target: the defaults, scaled by a --timeout twice the
// reference; a value the target file set stands unscaled and is named.
func TestCertTargetReportsTheTimes(t *testing.T) {
	t.Parallel()
	def := certTarget(harness.Target{Name: "a"}, 0)
	require.NotNil(t, def.Times)
	assert.Equal(t, harness.DefaultTurnTimeout, def.Times.Turn)
	assert.Equal(t, harness.DefaultStopGrace, def.Times.Stop)
	assert.Equal(t, 1.0, def.Times.Scale)
	slow := certTarget(harness.Target{Name: "a", StopGrace: harness.Duration(330 * time.Second)}, 2*harness.ReferenceScenarioTimeout)
	assert.Equal(t, 2*harness.DefaultTurnTimeout, slow.Times.Turn)
	assert.Equal(t, 2*harness.DefaultCallTimeout, slow.Times.Call)
	assert.Equal(t, 330*time.Second, slow.Times.Stop, "the target file's own stop grace stands")
	assert.Equal(t, []string{"stop_grace"}, slow.Times.FromTarget)
}
