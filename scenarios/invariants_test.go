package scenarios

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
)

// TestInvariantNamesAreTheTables: the scenarios' invariant names are the
// invariants package's; AllInvariants is derived from invariants.All (a
// name appended to it elsewhere, or a row missing, fails here); every
// phase check names registered invariants.
func TestInvariantNamesAreTheTables(t *testing.T) {
	t.Parallel()
	var want []Invariant
	for _, r := range invariants.All {
		if r.Name != invariants.Harness {
			want = append(want, r.Name)
		}
	}
	require.Equal(t, want, AllInvariants, "AllInvariants is every row of invariants.All but harness: add an invariant there")
	assert.Equal(t, invariants.Control, PositiveControl, "one name for the positive controls")
	for _, inv := range []Invariant{Requests, EnvSnapshots, Files, Text, WriteScope, LaunchBleed, PositiveControl,
		ProcessEscape, Availability, Authz, OperatorSecret, SharedPlace, Routing, SharedStore} {
		_, ok := invariants.Lookup(inv)
		assert.True(t, ok, "%s is not a row of invariants.All", inv)
	}
	assert.False(t, isFocusable(invariants.Harness))
	assert.False(t, isFocusable("positive_control"))
	assert.True(t, isFocusable(invariants.RPC), "every registered invariant may be a focus")

	names := map[string]bool{}
	for _, c := range phaseChecks {
		assert.NotEmpty(t, c.name)
		assert.False(t, names[c.name], "phase check %q twice", c.name)
		names[c.name] = true
		require.NotNil(t, c.run, c.name)
		for _, inv := range c.covers {
			_, ok := invariants.Lookup(inv)
			assert.True(t, ok, "phase check %q covers %s, which is not a row of invariants.All", c.name, inv)
		}
	}
}

// TestCatalogFocusesOnRegisteredInvariants: every scenario's focus is a
// registered invariant, and a spec focusing on an unregistered one is
// refused when the catalog is built.
func TestCatalogFocusesOnRegisteredInvariants(t *testing.T) {
	t.Parallel()
	for _, s := range Default().All() {
		for _, f := range s.Focus {
			assert.True(t, isFocusable(f), "%s focuses on %s", s.ID, f)
		}
	}
	spec := Spec{ID: "x", Purpose: "p", Backends: []harness.Backend{harness.BackendStdio}, Snapshots: perTenant(1),
		Timeout: MaxTimeout, Phases: []Phase{{Name: "a", Run: func(*Env) {}}}, Focus: []Invariant{"positive_control"}}
	_, err := NewCatalog(spec)
	require.ErrorContains(t, err, `focus "positive_control" is not an invariant`)
	spec.Focus = []Invariant{invariants.Control, invariants.RPC}
	_, err = NewCatalog(spec)
	require.NoError(t, err)
}

// TestNeedsUnmet: each need says why a bare target lacks it, and the
// embedded agentd target meets every need it can (restart and files need
// the harness to start it, which AgentdTarget says it does).
func TestNeedsUnmet(t *testing.T) {
	t.Parallel()
	bare := harness.Target{Name: "bare", Dialect: harness.Dialect{Methods: map[string]harness.MethodSpec{
		"plugins.install": {Unsupported: "no plugins here"}}}}
	agentd := harness.AgentdTarget("agentd")
	cases := []struct {
		need       Need
		bareWhy    string // a substring of why bare lacks it
		agentdMeet bool
	}{
		{NeedRestart, "restart the server", true},
		{NeedFiles, "target's files", true},
		{NeedPlugins, "no plugins here", true},
		{NeedLLMGateway, "needs llm_gateway", true},
		{NeedGatewayAccess, "needs llm_gateway.access", true},
		{NeedRoutes, "needs llm_gateway.routes", true},
		// agentd's gateway: access templates, no offboarding, no fetches.
		{NeedProvisioner, "needs llm_gateway.provision", false},
		{NeedDeprovision, "needs llm_gateway.deprovision", false},
		{NeedURLFields, "needs llm_gateway.routes[].url_fields", false},
	}
	for _, c := range cases {
		assert.Contains(t, c.need.Unmet(bare), c.bareWhy, c.need)
		if c.agentdMeet {
			assert.Empty(t, c.need.Unmet(agentd), c.need)
		} else {
			assert.Contains(t, c.need.Unmet(agentd), c.bareWhy, c.need)
		}
	}
	remote := agentd
	remote.URL = "ws://127.0.0.1:1"
	assert.Contains(t, NeedFiles.Unmet(remote), "cannot reach")
	assert.Contains(t, NeedRestart.Unmet(remote), "did not start it")
	assert.Contains(t, Need("nope").Unmet(agentd), `"nope"`, "an unknown need is never met")

	// Every need a spec declares has a row, and a spec declaring an
	// unknown one is refused.
	for _, s := range Default().All() {
		for _, n := range s.Needs {
			_, ok := lookupNeed(n)
			assert.True(t, ok, "%s needs %q", s.ID, n)
		}
	}
	seen := map[Need]bool{}
	for _, r := range needs {
		assert.False(t, seen[r.need], "need %q twice", r.need)
		seen[r.need] = true
		require.NotNil(t, r.unmet, r.need)
	}
	spec := Spec{ID: "x", Purpose: "p", Backends: []harness.Backend{harness.BackendStdio}, Snapshots: perTenant(1),
		Timeout: MaxTimeout, Phases: []Phase{{Name: "a", Run: func(*Env) {}}}, Needs: []Need{"nope"}}
	_, err := NewCatalog(spec)
	require.ErrorContains(t, err, `need "nope" is unknown`)
}
