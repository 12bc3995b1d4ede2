package harness

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOneAPIExampleDeprovision: one-api's target declares its deprovision
// command (the provisioner with the argument deprovision), so
// gateway-offboarding runs against it.
func TestOneAPIExampleDeprovision(t *testing.T) {
	t.Parallel()
	tg := loadExample(t, "one-api")
	assert.Equal(t, []string{"one-api-provision", "deprovision"}, tg.LLMGateway.Deprovision)
}

// TestHermesExampleRoutes: Hermes's target offers no gateway backend and
// says why (Hermes serves one profile's API per gateway process), so it
// declares no llm_gateway and its routes (hermes-agent #72041, #76932)
// are not probed: docs/real-targets.md says so.
func TestHermesExampleRoutes(t *testing.T) {
	t.Parallel()
	tg := loadExample(t, "hermes")
	require.False(t, tg.IsGateway())
	ok, why := tg.Supports(BackendGateway)
	assert.False(t, ok)
	assert.Contains(t, why, "one profile's OpenAI-compatible API per gateway process")
	assert.Nil(t, tg.LLMGateway, "no routes to probe without the gateway backend")
}
