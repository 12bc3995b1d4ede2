package scenarios

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
)

func TestCatalogIsValid(t *testing.T) {
	t.Parallel()
	c := Default()
	require.NotEmpty(t, c.All())
	for _, s := range c.All() {
		require.NoError(t, s.validate())
	}
}

func TestCatalogRejectsBadSpecs(t *testing.T) {
	t.Parallel()
	good := Spec{ID: "ok", Purpose: "p", Backends: []harness.Backend{harness.BackendStdio}, Snapshots: perTenant(1),
		Timeout: time.Minute, Phases: []Phase{{Name: "a", Run: func(*Env) {}}}}
	_, err := NewCatalog(good, good)
	assert.ErrorContains(t, err, `"ok" registered twice`)

	bad := Spec{ID: "Bad ID", Purpose: "two\nlines", Focus: []Invariant{"nope"}, Timeout: time.Hour,
		Phases: []Phase{{Name: "a"}, {Name: "a", Run: func(*Env) {}}}}
	_, err = NewCatalog(bad)
	for _, want := range []string{"want lower-case words", "purpose", "no backend", `phase "a" given twice`,
		"phase 0: want a name and a body", `focus "nope"`, "no expected snapshot count", "timeout 1h0m0s"} {
		assert.ErrorContains(t, err, want)
	}
}

func TestCatalogLookups(t *testing.T) {
	t.Parallel()
	c := Default()
	_, err := c.Get("pooled-serv")
	assert.ErrorContains(t, err, `did you mean "pooled-serve"`)
	_, err = c.Match("^nothing$")
	assert.ErrorContains(t, err, "matches no scenario; the catalog has: ")
	got, err := c.Match("^pooled")
	require.NoError(t, err)
	assert.Equal(t, "pooled-serve", got[0].ID)
	_, err = c.Match("(")
	assert.ErrorContains(t, err, "--run")
}

// TestTimeoutLengthensAndShortens: --timeout replaces a scenario's own
// timeout either way (a slow target needs more than the catalog guessed).
func TestTimeoutLengthensAndShortens(t *testing.T) {
	t.Parallel()
	spec := Spec{Timeout: 2 * time.Minute}
	require.Equal(t, 2*time.Minute, Config{}.timeoutOf(spec))
	require.Equal(t, 30*time.Second, Config{Timeout: 30 * time.Second}.timeoutOf(spec))
	require.Equal(t, 20*time.Minute, Config{Timeout: 20 * time.Minute}.timeoutOf(spec))
}

// TestGatewayScenarioNeedsDeclaredAccess: the agent-kind gateway scenario
// drives a tenant through the target's llm_gateway.access, never a guess
// of agentd's routes; a target with a gateway but no access skips it with
// that reason.
func TestGatewayScenarioNeedsDeclaredAccess(t *testing.T) {
	t.Parallel()
	spec, err := Default().Get("gateway")
	require.NoError(t, err)
	tg := harness.Target{Name: "x", Gateway: []string{"srv"}}
	require.Contains(t, spec.unmet(tg), "needs llm_gateway.access")
	tg.LLMGateway = &harness.LLMGateway{Access: &harness.AccessTemplate{Key: "{api_server_key}", BasePath: "/t/{tenant}/v1"}}
	require.Empty(t, spec.unmet(tg))
	require.Empty(t, spec.unmet(harness.AgentdTarget("agentd")))
}
