package harness

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// loadExample loads the target file of examples/targets/name.
func loadExample(t *testing.T, name string) Target {
	t.Helper()
	tg, err := LoadTarget(filepath.Join("..", "examples", "targets", name, "target.yaml"))
	require.NoError(t, err)
	return tg
}

// TestAgentdV030ExampleLoads keeps examples/targets/agentd-v0.3.0 (the
// multi-step family's real-world positive control, which ci.sh certifies)
// valid, and the embedded target's twin but for the binary it runs: were
// they to drift, the control would test a differently driven server.
func TestAgentdV030ExampleLoads(t *testing.T) {
	t.Parallel()
	tg := loadExample(t, "agentd-v0.3.0")
	assert.Equal(t, "0.3.0", tg.Version)
	emb := AgentdTarget("agentd-v0.3.0")
	assert.Equal(t, emb.Name, tg.Name)
	for name, pair := range map[string][2][]string{
		"stdio": {emb.Stdio, tg.Stdio}, "serve": {emb.Serve, tg.Serve}, "gateway": {emb.Gateway, tg.Gateway},
		"profile_root": {emb.ProfileRoot, tg.ProfileRoot}, "cron_tick": {emb.CronTick, tg.CronTick},
		"preflight": {emb.Preflight, tg.Preflight},
	} {
		assert.Equal(t, pair[0], pair[1], name)
	}
	assert.Equal(t, emb.ReadyLine, tg.ReadyLine)
	assert.Equal(t, emb.TokenVar, tg.TokenVar)
	assert.Equal(t, emb.Env, tg.Env)
	assert.Equal(t, emb.ManagedDir, tg.ManagedDir)
	assert.Equal(t, emb.ManagedConfig, tg.ManagedConfig)
	assert.Equal(t, emb.Files, tg.Files)
	assert.Equal(t, emb.TenantCredentials, tg.TenantCredentials)
	assert.Equal(t, emb.Layout, tg.Layout)
	require.NotNil(t, tg.LLMGateway)
	require.NotNil(t, tg.LLMGateway.Access)
	assert.Equal(t, *emb.LLMGateway.Access, *tg.LLMGateway.Access)
}
