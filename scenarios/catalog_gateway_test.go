package scenarios

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
)

// TestGatewayFamilyOnAgentd certifies agentd's own gateway with the
// gateway family: clean, with every control held.
func TestGatewayFamilyOnAgentd(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"gateway-tenants", "gateway-failover"} {
		t.Run(id, func(t *testing.T) {
			t.Parallel()
			spec, err := Default().Get(id)
			require.NoError(t, err)
			assert.NotEmpty(t, passesWithControls(t, runOne(t, spec, agentdTarget())))
		})
	}
}

// passesWithControls requires rep to pass with every control it made
// held, and returns the names of its controls.
func passesWithControls(t *testing.T, rep Report) map[string]bool {
	t.Helper()
	require.Equal(t, Pass, rep.Result, "%s: %v\n%v", rep.ID, rep.Log, rep.Findings())
	names := map[string]bool{}
	for _, p := range rep.Phases {
		for _, c := range p.Controls {
			assert.True(t, c.Passed, "%s/%s: %s: %s", p.Name, c.Tenant, c.Name, c.Detail)
			names[c.Name] = true
		}
	}
	return names
}

// TestGatewayRoutesOnAgentd: agentd declares its routes (its gateway's
// health page, the launch and the profiles' chat routes; its serve
// backend's health page and websocket endpoint), with the ids the harness
// has for its tenants (their profiles): gateway-routes probes them, as
// each owner, anonymously and across tenants, and passes with every
// control held.
func TestGatewayRoutesOnAgentd(t *testing.T) {
	t.Parallel()
	spec, err := Default().Get("gateway-routes")
	require.NoError(t, err)
	names := passesWithControls(t, runOne(t, spec, agentdTarget()))
	assert.True(t, names[`own route "health" answers`], "%v", names)
	assert.True(t, names[`own route "serve health" answers`], "the serve backend's routes were probed too: %v", names)
}

// TestGatewayFaultsCaught is the positive control of the failover and
// foreign-model checks: agentd with each seeded fault is caught by the
// expected invariant.
func TestGatewayFaultsCaught(t *testing.T) {
	t.Parallel()
	for _, f := range Faults() {
		if f.Name != "gateway-any-model" && f.Name != "gateway-failover-foreign" {
			continue
		}
		t.Run(f.Name, func(t *testing.T) {
			t.Parallel()
			spec, err := Default().Get(f.Scenario)
			require.NoError(t, err)
			rep := runOne(t, spec, withEnv(agentdTarget(), FaultEnv(f.Name)))
			assert.Equal(t, Leak, rep.Result, "%v", rep.Log)
			assert.NotEmpty(t, findingsOf(rep, f.Expect), "want a %s finding; got %v", f.Expect, rep.Findings())
			if f.Expect == invariants.Routing {
				for _, fd := range findingsOf(rep, f.Expect) {
					assert.Contains(t, fd.Detail, "failed", "%s", fd)
				}
			}
		})
	}
}

// TestScrubSentKeepsOtherData: what a request sent is blanked out of its
// reply, and nothing else.
func TestScrubSentKeepsOtherData(t *testing.T) {
	t.Parallel()
	body := []byte(`{"error": "no such model model-beta-0123456789 for key sk-alpha-0123456789; try model-gamma-0123456789"}`)
	got := string(scrubSent(body, harness.ChatRequest{Key: "sk-alpha-0123456789", Model: "model-beta-0123456789"}))
	assert.NotContains(t, got, "model-beta-0123456789")
	assert.NotContains(t, got, "sk-alpha-0123456789")
	assert.Contains(t, got, "model-gamma-0123456789", "another value stays, for the scan")
}
