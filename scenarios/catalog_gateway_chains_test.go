package scenarios

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
)

// withRoute is tg with the route named name changed by edit (on a copy of
// its llm_gateway block).
func withRoute(t *testing.T, tg harness.Target, name string, edit func(*harness.Route)) harness.Target {
	t.Helper()
	g := *tg.LLMGateway
	g.Routes = append([]harness.Route(nil), g.Routes...)
	for i := range g.Routes {
		if g.Routes[i].Name == name {
			edit(&g.Routes[i])
			tg.LLMGateway = &g
			require.NoError(t, tg.Validate())
			return tg
		}
	}
	t.Fatalf("testgw declares no route %q", name)
	return tg
}

// TestGatewayChainIsWhatCatchesTokenGroup: testgw's token-group hole
// answers the write as refused, so only the chain shows it (the switch-on
// case of TestGatewayRouteFormsCatchTestgwLeaks is its positive control).
// Without the route's then, gateway-routes passes over the same hole:
// the chain is what catches it. A chain whose chained route cannot be
// called fails its controls: a chain that stopped running never passes.
func TestGatewayChainIsWhatCatchesTokenGroup(t *testing.T) {
	t.Parallel()
	spec, err := Default().Get("gateway-routes")
	require.NoError(t, err)
	const move = "move my made token to a group"
	t.Run("without then", func(t *testing.T) {
		t.Parallel()
		tg := withRoute(t, testgwTarget(t, "token-group"), move, func(r *harness.Route) { r.Then = nil })
		rep := runOne(t, spec, tg)
		for _, f := range rep.Findings() {
			assert.NotContains(t, f.Place, move, "no chain, no finding on the route: %s", f)
		}
		assert.Equal(t, Pass, rep.Result, "%v\n%v", rep.Log, rep.Findings())
	})
	t.Run("chain cannot run", func(t *testing.T) {
		t.Parallel()
		tg := withRoute(t, testgwTarget(t, ""), "models by my made key", func(r *harness.Route) {
			r.Forms = harness.AuthForms{{Name: "a key never captured", Bearer: "{own.never_captured_id}"}}
		})
		rep := runOne(t, spec, tg)
		assert.Equal(t, Failed, rep.Result, "%v", rep.Log)
		all := strings.Join(failedControls(rep), "\n")
		assert.Contains(t, all, `chain "move my made token to a group" then "models by my made key" answers after its own call: route "models by my made key" cannot be called`)
		assert.Contains(t, all, `chain "move my made token to a group" then "models by my made key" answers after each cross-tenant probe`)
	})
}

// failedControls are rep's failed controls, each "name: detail".
func failedControls(rep Report) []string {
	var failed []string
	for _, p := range rep.Phases {
		for _, c := range p.Controls {
			if !c.Passed {
				failed = append(failed, c.Name+": "+c.Detail)
			}
		}
	}
	return failed
}
