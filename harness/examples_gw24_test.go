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

// TestHermesExampleRoutes: Hermes's target declares its gateway and the
// routes of hermes-agent #72041 (a webhook path naming another profile)
// and #76932 (listings of the serve backend), in the agent-target form:
// access templates, {profile_id}, backend: serve.
func TestHermesExampleRoutes(t *testing.T) {
	t.Parallel()
	tg := loadExample(t, "hermes")
	require.False(t, tg.IsGateway())
	require.NotNil(t, tg.LLMGateway)
	require.NotNil(t, tg.LLMGateway.Access)
	ok, why := tg.Supports(BackendGateway)
	assert.True(t, ok, why)
	byName := map[string]Route{}
	for _, r := range tg.LLMGateway.Routes {
		byName[r.Name] = r
	}
	hook := byName["webhook of a profile"]
	assert.Equal(t, "POST", hook.Method)
	assert.True(t, hook.NamesForeignIDs(), "probed across profiles")
	assert.False(t, hook.OnServe())
	for _, name := range []string{"profile listing", "session listing", "another profile's sessions"} {
		r := byName[name]
		assert.True(t, r.OnServe(), name)
		require.Len(t, r.CredentialForms(), 1, name)
		assert.False(t, r.CredentialForms()[0].MustWork(), name)
	}
	assert.True(t, byName["another profile's sessions"].NamesForeignIDs())
	assert.Equal(t, []string{"?profile={own.profile_id}"}, byName["session listing"].Variants)
}
