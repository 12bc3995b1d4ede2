package invariants

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/invariants/scan"
	"github.com/tenantcanary/tenantcanary/tenants"
)

func waitRequests(t *testing.T, tn *tenants.Tenant, n int) []fakellm.Record {
	t.Helper()
	var recs []fakellm.Record
	require.Eventually(t, func() bool {
		recs = tn.Provider.Requests()
		return len(recs) >= n
	}, 10*time.Second, 5*time.Millisecond, "%s's provider to record %d request(s)", tn.Name, n)
	return recs
}

// TestRequestLeaksEveryEncoding plants beta's canary in alpha's request, in
// every encoding, and expects exactly that finding.
func TestRequestLeaksEveryEncoding(t *testing.T) {
	t.Parallel()
	for _, enc := range scan.Encodings {
		t.Run(string(enc), func(t *testing.T) {
			t.Parallel()
			s := newSet(t)
			alpha, beta := s.Get("alpha"), s.Get("beta")
			leak := beta.Value(tenants.Memory)
			post(t, alpha, alpha.ProviderKey(), chat(alpha.Model(), user("remember "+encoded(leak, enc)+" please")))
			waitRequests(t, alpha, 1)
			got := RequestLeaks(s.Tenants)
			want := enc
			if enc == scan.Base64URL && b64(leak, true) == b64(leak, false) {
				want = scan.Base64
			}
			require.Equal(t, []string{"request alpha beta/memory " + string(want)}, findingKeys(got), Format(got))
			require.Equal(t, 0, *got[0].Where.Request)
			require.Equal(t, "/v1/chat/completions", got[0].Where.Path)
			require.Empty(t, ControlKeys([]*tenants.Tenant{alpha}))
		})
	}
}

func TestRequestLeaksKeysModelsHeaders(t *testing.T) {
	t.Parallel()
	s := newSet(t)
	alpha, beta, def := s.Get("alpha"), s.Get("beta"), s.Get("default")

	// Clean: own canaries, a bare tag, another tenant's name alone.
	post(t, alpha, alpha.ProviderKey(), chat(alpha.Model(), user("I am "+alpha.Value(tenants.Soul)+" in "+alpha.Workdir+
		"; tag "+beta.Tag+" of beta, model-beta- and provider-key-beta")))
	waitRequests(t, alpha, 1)
	require.Empty(t, RequestLeaks(s.Tenants), Format(RequestLeaks(s.Tenants)))

	// Beta's key on alpha's provider, the launch model, a header leak.
	post(t, alpha, beta.ProviderKey(), chat(alpha.Model(), user("hi")))
	post(t, alpha, alpha.ProviderKey(), chat(def.Model(), user("hi")))
	post(t, alpha, alpha.ProviderKey(), map[string]any{"model": "x", "messages": []any{user("aux")}}, "X-Trace", "trace "+beta.Value(tenants.EnvMarker))
	waitRequests(t, alpha, 4)
	got := RequestLeaks(s.Tenants)
	require.Equal(t, []string{
		"request alpha beta/provider_key ",
		"request alpha beta/provider_key raw",
		"request alpha default/model ",
		"request alpha default/model raw",
		"request alpha beta/env_marker raw",
	}, findingKeys(got), Format(got))
	require.Equal(t, "auth", got[0].Where.Part)
	require.Equal(t, "header authorization", got[1].Where.Part)
	require.Equal(t, "model", got[2].Where.Part)
	require.Equal(t, "header x-trace", got[4].Where.Part)
	require.Equal(t, 3, *got[4].Where.Request)
	require.Contains(t, got[0].String(), "request: alpha request #1 /v1/chat/completions auth: carries beta's provider_key")

	// A tenant whose provider saw nothing fails its control.
	ctl := ControlKeys(s.Tenants)
	require.Equal(t, []string{"control default / ", "control beta / "}, findingKeys(ctl))
}

// TestKeylessMetadataProbeIsNoKeyViolation sends alpha's provider the
// metadata probes real clients make before a turn (GET, no key): they are
// recorded and scanned (a foreign canary in one's header is still found)
// but are no key violation by themselves; a keyless POST still is, and so
// is a GET with another tenant's key.
func TestKeylessMetadataProbeIsNoKeyViolation(t *testing.T) {
	t.Parallel()
	s := newSet(t)
	alpha, beta := s.Get("alpha"), s.Get("beta")
	get := func(path, auth string, headers ...string) {
		req, err := http.NewRequest(http.MethodGet, alpha.Provider.URL+path, nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
	}
	for _, p := range []string{"/api/v1/models", "/api/tags", "/v1/props", "/version"} {
		get(p, "")
	}
	waitRequests(t, alpha, 4)
	require.Empty(t, RequestLeaks(s.Tenants), "keyless metadata probes")

	get("/api/tags", "", "X-Probe", beta.Value(tenants.EnvMarker))
	get("/v1/models", beta.ProviderKey())
	postTo(t, alpha, "/chat/completions", "", chat(alpha.Model(), user("hi")))
	waitRequests(t, alpha, 7)
	var parts []string
	for _, f := range RequestLeaks(s.Tenants) {
		parts = append(parts, f.Where.Part+":"+f.Owner)
	}
	require.ElementsMatch(t, []string{"header x-probe:beta", "auth:beta", "header authorization:beta", "auth:"}, parts)
}

// A model name two tenants both declared (Tenant.Share) is no leak in
// either's requests nor in a session's report; in a third tenant's request
// it is still its owner's canary, and the sharer's own key, marker and
// model, when another tenant's request carries them, still are too.
func TestSharedModelIsNoForeignCanary(t *testing.T) {
	t.Parallel()
	s := newSet(t)
	def, alpha, beta := s.Get("default"), s.Get("alpha"), s.Get("beta")
	shared := tenants.Canary{Owner: "alpha", Kind: tenants.Model, Value: alpha.Model()}
	require.NoError(t, beta.Share(shared))
	require.Error(t, beta.Share(tenants.Canary{Owner: "alpha", Kind: tenants.ProviderKey, Value: alpha.ProviderKey()}), "only a model name is shared")
	require.Error(t, alpha.Share(shared), "not one's own")
	post(t, beta, beta.ProviderKey(), chat(alpha.Model(), user("hello")))
	require.Empty(t, RequestLeaks(s.Tenants), "beta's request names the model it shares")
	require.Empty(t, LaunchBleedOf(s.Tenants, "beta", alpha.Model(), "session.create info.model"))

	post(t, beta, beta.ProviderKey(), chat(alpha.Model(), user("and "+alpha.Value(tenants.EnvMarker))))
	post(t, def, def.ProviderKey(), chat(def.Model(), user("seen "+alpha.Model())))
	var got []string
	for _, f := range RequestLeaks(s.Tenants) {
		got = append(got, f.Tenant+" "+f.Owner+" "+string(f.Kind))
	}
	require.Contains(t, got, "beta alpha env_marker", "the sharer's marker is still foreign")
	require.Contains(t, got, "default alpha model", "to a tenant that does not share it, the model is alpha's")
}

// TestRequestCacheJudgesOnlyNewRequests: a Checker with a RequestCache
// finds what one without does, judging only the requests that came since
// its last call; a canary minted since (a new state of the canaries)
// judges every request again, and finds a leak of the new canary in an
// old request (the cache never hides one).
func TestRequestCacheJudgesOnlyNewRequests(t *testing.T) {
	t.Parallel()
	s := newSet(t)
	alpha, beta := s.Get("alpha"), s.Get("beta")
	rc := NewRequestCache()
	cached := func() []Finding {
		c, err := NewChecker(s.Tenants)
		require.NoError(t, err)
		return c.WithRequestCache(rc).RequestLeaks()
	}
	post(t, alpha, alpha.ProviderKey(), chat(alpha.Model(), user("mine "+alpha.Value(tenants.Soul))))
	post(t, alpha, beta.ProviderKey(), chat(alpha.Model(), user("hi")))
	waitRequests(t, alpha, 2)
	require.Equal(t, findingKeys(RequestLeaks(s.Tenants)), findingKeys(cached()))
	judged := rc.judges
	require.Positive(t, judged)

	// Nothing new: nothing judged, the same findings.
	require.Equal(t, findingKeys(RequestLeaks(s.Tenants)), findingKeys(cached()))
	require.Equal(t, judged, rc.judges, "an old request was judged again")

	// One more request: only it is judged.
	post(t, alpha, alpha.ProviderKey(), chat(alpha.Model(), user("carries "+beta.Value(tenants.Memory))))
	waitRequests(t, alpha, 3)
	got := cached()
	require.Equal(t, findingKeys(RequestLeaks(s.Tenants)), findingKeys(got))
	require.Equal(t, judged+1, rc.judges)

	// A new state of the canaries (alpha now shares beta's model name,
	// as colliding-inputs declares): every request is judged again, and
	// an old request's finding follows the new state.
	post(t, alpha, alpha.ProviderKey(), chat(beta.Model(), user("hi")))
	waitRequests(t, alpha, 4)
	require.Contains(t, findingKeys(cached()), "request alpha beta/model ")
	var model tenants.Canary
	for _, c := range beta.Canaries() {
		if c.Kind == tenants.Model {
			model = c
		}
	}
	require.NoError(t, alpha.Share(model))
	n := rc.judges
	after := cached()
	require.Equal(t, findingKeys(RequestLeaks(s.Tenants)), findingKeys(after))
	require.NotContains(t, findingKeys(after), "request alpha beta/model ", "a finding of the old state was served")
	require.Equal(t, n+4, rc.judges, "a new state of the canaries did not judge every request again")
}

// A request's body, judged from the record's decoded body, gives what the
// same body judged from its bytes gives: the same findings at the same
// JSON paths. beta's soul is whole only once decoded (its first letter
// escaped), under a key "" in an array.
func TestRequestBodyJudgedFromItsDecodedBodyAsFromItsBytes(t *testing.T) {
	t.Parallel()
	s := newSet(t)
	alpha, beta := s.Get("alpha"), s.Get("beta")
	soul := beta.Value(tenants.Soul)
	escaped := fmt.Sprintf(`\u%04x`, soul[0]) + soul[1:]
	require.NotContains(t, escaped, soul)
	raw := `{"model":"` + alpha.Model() + `","messages":[{"role":"user","content":"plain"},{"role":"tool","content":["x",{"":"y ` + escaped + `"}]}],"` + beta.Value(tenants.Memory) + `":"a key"}`
	post(t, alpha, alpha.ProviderKey(), json.RawMessage(raw))
	rec := waitRequests(t, alpha, 1)[0]
	require.NotNil(t, rec.Body)
	m, err := compile(s.Tenants)
	require.NoError(t, err)
	w := Where{Part: "body"}
	fromDoc := m.findJSONDoc(Request, alpha.Name, rec.RawBody, rec.Body, w, false)
	fromBytes := m.findJSON(Request, alpha.Name, rec.RawBody, w, false)
	require.Equal(t, fromBytes, fromDoc)
	parts := map[string]string{}
	for _, f := range fromDoc {
		parts[string(f.Kind)] = f.Where.Part
	}
	require.Equal(t, map[string]string{"memory": "body", "soul": "body $.messages[1].content[1]."}, parts, Format(fromDoc))
}

// walkStrings names every string and key by its JSON path.
func TestWalkStringsPaths(t *testing.T) {
	t.Parallel()
	var got []string
	walkStrings(map[string]any{"b": []any{"s0", []any{"s1"}, 2.0, map[string]any{"": "empty"}}, "a": "sa"}, func(path func() string, s string) {
		got = append(got, path()+"="+s)
	})
	require.Equal(t, []string{"$.a (key)=a", "$.a=sa", "$.b (key)=b", "$.b[0]=s0", "$.b[1][0]=s1", "$.b[3]. (key)=", "$.b[3].=empty"}, got)
}

// TestAlsoServedModelIsDeclared: a main request naming a model name that
// is no canary (one every tenant was provisioned under) is a request
// finding until the tenant declares it (Tenant.AlsoServes); the declared
// name is part of the request cache's state, so a cached judgement is
// made again once it is declared.
func TestAlsoServedModelIsDeclared(t *testing.T) {
	t.Parallel()
	s := newSet(t)
	alpha := s.Get("alpha")
	const shared = "collide-model-0123456789abcdef"
	rc := NewRequestCache()
	cached := func() []Finding {
		c, err := NewChecker(s.Tenants)
		require.NoError(t, err)
		return c.WithRequestCache(rc).RequestLeaks()
	}
	post(t, alpha, alpha.ProviderKey(), chat(shared, user("hello")))
	waitRequests(t, alpha, 1)
	fs := cached()
	require.Len(t, fs, 1, "a model name alpha does not declare")
	require.Contains(t, fs[0].Detail, `names model "`+shared+`"`)
	alpha.AlsoServes(shared)
	alpha.AlsoServes(shared)
	require.Equal(t, []string{shared}, alpha.Serves(), "declared once")
	require.True(t, alpha.Declares(shared))
	require.Empty(t, cached(), "declared: no finding, the cached one judged again")
	require.False(t, s.Get("beta").Declares(shared), "only alpha declared it")
}
