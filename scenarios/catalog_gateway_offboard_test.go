package scenarios

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/invariants"
)

// TestGatewayOffboardFetchOnTestgw certifies the clean test gateway with
// gateway-offboarding and gateway-fetch: passed, every control held, the
// ones that make their refusals mean something among them.
func TestGatewayOffboardFetchOnTestgw(t *testing.T) {
	t.Parallel()
	tg := testgwTarget(t, "")
	for id, want := range map[string][]string{
		"gateway-offboarding": {"gateway key accepted on the relay before offboarding", "management headers accepted on route \"own token\" before offboarding",
			"own key still served after a neighbour's offboarding", "own key answered by own provider",
			`credential session accepted on route "own user" before offboarding`},
		"gateway-fetch": {"the fetch listener answers on loopback", `webhook stored through "set my webhook" is called on its owner's trigger`,
			`fetch trigger "test my webhook" answers after "set my webhook"`},
	} {
		t.Run(id, func(t *testing.T) {
			t.Parallel()
			spec, err := Default().Get(id)
			require.NoError(t, err)
			rep := runOne(t, spec, tg)
			names := passesWithControls(t, rep)
			for _, w := range want {
				assert.True(t, names[w], "control %q ran: %v", w, names)
			}
			skipped := skipReasons(rep)
			assert.Contains(t, skipped[string(Files)], "keeps no tenant homes: its store", "no 'files not reachable' when the store is read")
			assert.Contains(t, skipped[string(SharedPlace)], "files: false")
		})
	}
}

func skipReasons(rep Report) map[string]string {
	out := map[string]string{}
	for _, s := range rep.Skipped {
		out[s.Invariant] = s.Reason
	}
	return out
}

// TestGatewayFilesOnTestgw: with files: true and no profile_root, a
// gateway's sandbox is scanned as shared places, its declared store
// excluded: the clean test gateway passes with the shared-place check
// run, and one that writes upstream keys into its working folder is
// caught.
func TestGatewayFilesOnTestgw(t *testing.T) {
	t.Parallel()
	spec, err := Default().Get("gateway-tenants")
	require.NoError(t, err)
	for _, leak := range []string{"", "cwd-file"} {
		t.Run("leak="+leak, func(t *testing.T) {
			t.Parallel()
			tg := testgwTarget(t, leak)
			tg.Files = true
			rep := runOne(t, spec, tg)
			skipped := skipReasons(rep)
			assert.NotContains(t, skipped, string(SharedPlace), "the shared places were scanned")
			assert.Contains(t, skipped[string(Files)], "keeps no tenant homes")
			if leak == "" {
				require.Equal(t, Pass, rep.Result, "%v\n%v", rep.Log, rep.Findings())
				return
			}
			assert.Equal(t, Leak, rep.Result, "%v", rep.Log)
			fs := findingsOf(rep, invariants.SharedPlace)
			require.NotEmpty(t, fs, "want a shared_place finding; got %v", rep.Findings())
			assert.Contains(t, fs[0].String(), "channels.txt")
		})
	}
}

// TestGatewayOffboardSkipsWithoutDeprovision: a target with no
// deprovision (agentd's gateway) skips gateway-offboarding with that
// reason, and gateway-fetch (no url_fields) likewise: never passed.
func TestGatewayOffboardSkipsWithoutDeprovision(t *testing.T) {
	t.Parallel()
	for id, why := range map[string]string{"gateway-offboarding": "deprovision", "gateway-fetch": "url_fields"} {
		t.Run(id, func(t *testing.T) {
			t.Parallel()
			spec, err := Default().Get(id)
			require.NoError(t, err)
			rep := runOne(t, spec, agentdTarget())
			require.Equal(t, Skipped, rep.Result, "%v", rep.Log)
			assert.Contains(t, rep.Reason, why)
		})
	}
}

// TestGatewayRound2ChecksCatchTestgwLeaks is the positive control of each
// check of issue 24 part B against the test gateway made to leak.
func TestGatewayRound2ChecksCatchTestgwLeaks(t *testing.T) {
	t.Parallel()
	type want struct {
		inv    invariants.Invariant
		detail string
	}
	cases := []struct {
		leak, scenario string
		wants          []want
	}{
		{"stale-session", "gateway-offboarding", []want{
			{invariants.Authz, "after its disable, "},
			{invariants.Authz, "(gateway key) was accepted on the relay"},
			{invariants.Authz, "after its delete, "},
			{invariants.Authz, "drove"},
		}},
		{"name-reuse", "gateway-offboarding", []want{
			{invariants.Authz, "holds the old one's data"},
			{invariants.Authz, "after its delete and a new tenant under its name, "},
		}},
		{"fetch", "gateway-fetch", []want{
			{invariants.Fetch, "fetched the loopback URL"},
			{invariants.Fetch, "came back to"},
		}},
		{"log-route", "gateway-routes", []want{{invariants.Authz, "an owner-only row of the store"}}},
		// A later fetch on another route: the webhook stored last by
		// anyone is called too, with the caller's data.
		{"webhook-cross", "gateway-fetch", []want{
			{invariants.Fetch, `route "set my webhook" then "test my webhook"`},
			{invariants.Fetch, "a fetch made on"},
			{invariants.Fetch, `the gateway's request on a URL stored through route "set my webhook"`},
			{invariants.Fetch, "carries another tenant's data"},
		}},
		// An array URL field: the image part of a message is fetched.
		{"vision-fetch", "gateway-fetch", []want{
			{invariants.Fetch, "url field messages[].content[].image_url.url"},
			{invariants.Fetch, "fetched the loopback URL"},
		}},
		{"operator-secret", "gateway-tenants", []want{{invariants.OperatorSecret, "admin_password"}}},
	}
	for _, c := range cases {
		t.Run(c.leak+"/"+c.scenario, func(t *testing.T) {
			t.Parallel()
			spec, err := Default().Get(c.scenario)
			require.NoError(t, err)
			rep := runOne(t, spec, testgwTarget(t, c.leak))
			assert.Equal(t, Leak, rep.Result, "%v", rep.Log)
			for _, w := range c.wants {
				assert.Contains(t, findingText(t, rep, w.inv), w.detail)
			}
		})
	}
}

// TestGatewayCollideOnTestgw: every testgw tenant provisioned with one
// model name chats in both orders, each served by its own provider; the
// test gateway with a model-keyed client cache is caught (routing), and
// agentd, whose tenants' models are fixed by its access templates, skips
// the scenario with that reason.
func TestGatewayCollideOnTestgw(t *testing.T) {
	t.Parallel()
	spec, err := Default().Get("gateway-collide")
	require.NoError(t, err)
	t.Run("clean", func(t *testing.T) {
		t.Parallel()
		names := passesWithControls(t, runOne(t, spec, testgwTarget(t, "")))
		assert.True(t, names["own provider answers under the shared model name"], "%v", names)
		assert.True(t, names["own upstream tried during failover (5xx under the shared model name)"], "%v", names)
	})
	t.Run("model-cache", func(t *testing.T) {
		t.Parallel()
		rep := runOne(t, spec, testgwTarget(t, "model-cache"))
		assert.Equal(t, Leak, rep.Result, "%v", rep.Log)
		assert.Contains(t, findingText(t, rep, invariants.Routing), "shared model name")
	})
	// A retry on every other channel: under one model name it reaches
	// another tenant's provider (gateway-failover's distinct models hide
	// a retry that keeps to the model's name).
	t.Run("failover", func(t *testing.T) {
		t.Parallel()
		rep := runOne(t, spec, testgwTarget(t, "failover"))
		assert.Equal(t, Leak, rep.Result, "%v", rep.Log)
		assert.Contains(t, findingText(t, rep, invariants.Routing), "while its own upstream failed (5xx under the shared model name")
	})
	t.Run("agentd", func(t *testing.T) {
		t.Parallel()
		rep := runOne(t, spec, agentdTarget())
		require.Equal(t, Skipped, rep.Result, "%v", rep.Log)
		assert.Contains(t, rep.Reason, "one model name")
	})
}

// TestGatewayOffboardEveryFormOnTestgw is the positive control of
// offboarding's per-route credential forms: a test gateway where only a
// form other than the key and the management headers survives a disable
// (the session cookie the provisioner printed, or the key with a channel
// suffix that a route's auth template sends) is caught on that form, and
// the forms that are refused give no finding.
func TestGatewayOffboardEveryFormOnTestgw(t *testing.T) {
	t.Parallel()
	spec, err := Default().Get("gateway-offboarding")
	require.NoError(t, err)
	for leak, form := range map[string]string{
		"stale-cookie": `(credential session) was accepted on route "own user"`,
		"stale-pin":    `(auth form "key with a channel suffix") was accepted on route "chat through a pinned channel"`,
	} {
		t.Run(leak, func(t *testing.T) {
			t.Parallel()
			rep := runOne(t, spec, testgwTarget(t, leak))
			assert.Equal(t, Leak, rep.Result, "%v", rep.Log)
			all := findingText(t, rep, invariants.Authz)
			assert.Contains(t, all, "after its disable, ")
			assert.Contains(t, all, form)
			assert.NotContains(t, all, "(gateway key) was accepted", "the bare key is refused")
			assert.NotContains(t, all, "(management headers) was accepted", "the access token as a bearer is refused")
		})
	}
}
