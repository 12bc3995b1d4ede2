package scenarios

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
)

// TestGatewayRouteFormsCatchTestgwLeaks is the positive control of each
// route probe: testgw made to leak through an anonymous route, a channel
// pinned by a key suffix, an owner-mixed route, a captured id, and a
// filter that drops the owner condition is caught by gateway-routes on
// the route that leaks, each hole once per caller and owner.
func TestGatewayRouteFormsCatchTestgwLeaks(t *testing.T) {
	t.Parallel()
	cases := []struct {
		leak, route, detail string
		tenant              string // the finding's tenant, when it is not a tenant's name
	}{
		{"anon-logs", `route "own logs"`, "an anonymous call (no credentials) was not refused", Anonymous},
		{"anon-logs", `route "own logs"`, "carries another tenant's data", Anonymous},
		{"key-channel", `route "chat through a pinned channel"`, "(auth key with a channel suffix) with", ""},
		{"key-channel", `route "chat through a pinned channel"`, "drove 1 request(s) to its provider", ""},
		{"mixed-owner", `route "bind my token to a channel"`, "were not refused", ""},
		{"made-token", `route "made token"`, "'s ids were not refused", ""},
		{"log-filter", `route "own logs"`, "own call (auth headers, variant ?keyword=gateway) carries another tenant's data", ""},
		// A chain across routes: the write answers as refused; the model
		// list with the caller's own made key, called after it, carries
		// the other tenant's model.
		{"token-group", `route "move my made token to a group" then "models by my made key"`, "own call of route \"models by my made key\" (auth made key) carries another tenant's data", ""},
	}
	for _, c := range cases {
		t.Run(c.leak+"/"+strings.ReplaceAll(c.detail, " ", "-"), func(t *testing.T) {
			t.Parallel()
			spec, err := Default().Get("gateway-routes")
			require.NoError(t, err)
			rep := runOne(t, spec, testgwTarget(t, c.leak))
			assert.Equal(t, Leak, rep.Result, "%v", rep.Log)
			var got []string
			seen := map[string]int{}
			for _, p := range rep.Phases {
				for _, f := range p.Findings {
					if f.Invariant != invariants.Authz {
						continue
					}
					got = append(got, f.String())
					if f.Place == c.route && strings.Contains(f.String(), c.detail) && (c.tenant == "" || f.Tenant == c.tenant) {
						seen[p.Name]++
					}
					// One finding per (invariant, place, owner, tenant) in a phase.
					key := p.Name + "|" + f.Place + "|" + f.Owner + "|" + f.Tenant
					if f.Place != "" {
						seen["key "+key]++
						assert.Equal(t, 1, seen["key "+key], "twice: %s", f)
					}
				}
			}
			n := 0
			for k, v := range seen {
				if !strings.HasPrefix(k, "key ") {
					n += v
				}
			}
			assert.Positive(t, n, "want an authz finding on %s with %q; got:\n%s", c.route, c.detail, strings.Join(got, "\n"))
		})
	}
}

// TestGatewayRouteFindingsCollapse: testgw's token route serving any
// user's token shows the hole to every guessed id and in every form; the
// findings are one per caller and owner, with a count, where they were
// three per pair.
func TestGatewayRouteFindingsCollapse(t *testing.T) {
	t.Parallel()
	spec, err := Default().Get("gateway-routes")
	require.NoError(t, err)
	rep := runOne(t, spec, testgwTarget(t, "token-route"))
	require.Equal(t, Leak, rep.Result, "%v", rep.Log)
	keys := map[string]int{}
	counted := 0
	for _, f := range rep.Findings() {
		if f.Place != `route "own token"` {
			continue
		}
		keys[string(f.Invariant)+"|"+f.Owner+"|"+f.Tenant]++
		if f.Count > 1 {
			counted++
			assert.Contains(t, f.String(), "times)", "the count shows in the line")
		}
	}
	require.NotEmpty(t, keys, "%v", rep.Findings())
	for k, n := range keys {
		assert.Equal(t, 1, n, "%s: one finding per invariant, route, owner and tenant", k)
	}
	assert.Positive(t, counted, "some finding folds several calls")
}

// TestRouteIDVariantsNeverGuessMadeIDs: guesses come from the
// provisioner's ids only, never name an id the caller owns or made, and
// name whose id they guessed.
func TestRouteIDVariantsNeverGuessMadeIDs(t *testing.T) {
	t.Parallel()
	prov := map[string]map[string]string{"alpha": {"token": "1"}, "beta": {"token": "2"}, "gamma": {"token": "3"}}
	all := map[string]string{"token": "2", "made_token": "7"}
	sets := routeIDVariants("beta", prov, all, map[string]bool{"token=1": true}, map[string]bool{"4": true})
	var guessed []string
	for _, s := range sets[1:] {
		guessed = append(guessed, s.ids["token"]+"/"+s.owner)
		assert.Equal(t, "7", s.ids["made_token"], "a captured id is never shifted")
	}
	assert.Equal(t, []string{"3/gamma"}, guessed, "1 is the caller's, 4 it made")
	assert.Equal(t, "beta", sets[0].owner)
}

// TestGatewayRouteMissingFormFailsItsControl: a read route's form the
// provisioner printed no credential for is a failed control, never a
// silent pass.
func TestGatewayRouteMissingFormFailsItsControl(t *testing.T) {
	t.Parallel()
	tg := testgwTarget(t, "")
	tg.LLMGateway.Routes = append([]harness.Route{{Name: "own user by cookie", Method: "GET", Path: "/api/user/self", Read: true,
		Forms: harness.AuthForms{{Name: "headers"}, {Name: "cookie"}}, Success: `"success":\s*true`}}, tg.LLMGateway.Routes[:1]...)
	spec, err := Default().Get("gateway-routes")
	require.NoError(t, err)
	rep := runOne(t, spec, tg)
	assert.Equal(t, Failed, rep.Result, "%v", rep.Log)
	failed := failedControls(rep)
	require.NotEmpty(t, failed)
	assert.Contains(t, strings.Join(failed, "\n"), `own route "own user by cookie" answers (auth cookie): auth form "cookie": the provisioner printed no credential "cookie"`)
}
