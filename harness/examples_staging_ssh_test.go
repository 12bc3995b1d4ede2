package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStagingSSHExampleGatewayIsAgentds keeps the ssh staging example's
// gateway block (examples/targets/staging-ssh, run by
// scenarios.TestStagingOverSSH) what the embedded agentd target declares
// for agentd's gateway: its access and its routes, so the two cannot
// drift apart.
func TestStagingSSHExampleGatewayIsAgentds(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "examples", "targets", "staging-ssh", "staging.yaml"))
	require.NoError(t, err)
	fill := strings.NewReplacer("STAGE", "/srv/stage", "SSH_PORT", "2222", "SERVE_PORT", "8787", "GATEWAY_PORT", "8642", "SSH_USER", "agentd")
	path := filepath.Join(t.TempDir(), "staging.yaml")
	require.NoError(t, os.WriteFile(path, []byte(fill.Replace(string(data))), 0o600))
	tg, err := LoadTarget(path)
	require.NoError(t, err)
	assert.Equal(t, "http://127.0.0.1:8642", tg.GatewayURL)
	assert.Equal(t, "http://127.0.0.1:8642/health", tg.GatewayReadyURL(), "remote.start waits for the gateway too")
	require.NotNil(t, tg.LLMGateway)
	require.NotNil(t, tg.LLMGateway.Access)
	assert.Equal(t, AgentdAccess, *tg.LLMGateway.Access)
	agentd := AgentdTarget("agentd")
	require.NoError(t, agentd.Validate())
	assert.Equal(t, agentd.LLMGateway.Routes, tg.LLMGateway.Routes)
	ok, why := tg.Supports(BackendGateway)
	assert.True(t, ok, why)
}
