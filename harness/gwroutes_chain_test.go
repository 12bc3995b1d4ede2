package harness

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGatewayChainsLoad: then, capture_secrets and webhook load from a
// target file; ChainedRoutes gives the routes a then names, in order.
func TestGatewayChainsLoad(t *testing.T) {
	t.Parallel()
	text := `name: gw
kind: gateway
gateway: [gw, --port, "{port}"]
llm_gateway:
  provision: [provision]
  routes:
    - {name: mint, method: POST, path: /api/key, capture: {made_key: $.data.key}, capture_secrets: [made_key]}
    - {name: move, method: PUT, path: "/api/token/{own.token_id}/group", body: '{"group": {group_id}}', then: [models, usage]}
    - {name: models, path: /v1/models, auth: [{name: made key, bearer: "{own.made_key_id}"}]}
    - {name: usage, path: /api/usage}
    - {name: hook, method: PUT, path: /api/hook, body: '{"url": "http://x.invalid/"}', url_fields: [url], webhook: true, then: [ping]}
    - {name: ping, method: POST, path: /api/hook/ping}
`
	path := filepath.Join(t.TempDir(), "gw.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	tg, err := LoadTarget(path)
	require.NoError(t, err)
	rs := tg.LLMGateway.Routes
	assert.Equal(t, []string{"made_key"}, rs[0].CaptureSecrets)
	var names []string
	for _, r := range ChainedRoutes(rs, rs[1]) {
		names = append(names, r.Name)
	}
	assert.Equal(t, []string{"models", "usage"}, names)
	assert.True(t, rs[4].Webhook)
	assert.Empty(t, ChainedRoutes(rs, rs[2]), "a route with no then chains nothing")
}

// TestGatewayChainsValidation: a then naming no route, the route itself
// or one route twice, a capture secret that is no capture, and a webhook
// without a then or url_fields are refused, naming the field.
func TestGatewayChainsValidation(t *testing.T) {
	t.Parallel()
	other := Route{Name: "models", Path: "/v1/models"}
	for name, c := range map[string]struct {
		route Route
		want  string
	}{
		"unknown then":       {Route{Name: "move", Path: "/t", Then: []string{"modles"}}, `llm_gateway.routes[0] (move): then[0] "modles": no route of that name (routes: move, models)`},
		"then itself":        {Route{Name: "move", Path: "/t", Then: []string{"move"}}, `then[0] "move": a route cannot follow itself`},
		"then twice":         {Route{Name: "move", Path: "/t", Then: []string{"models", "models"}}, `then[1] "models": listed twice`},
		"secret not capture": {Route{Name: "move", Path: "/t", Capture: map[string]string{"a": "$.a"}, CaptureSecrets: []string{"b"}}, `capture_secrets[0] "b": not one of the route's captures`},
		"webhook no then":    {Route{Name: "move", Path: "/t", Body: `{"url": ""}`, URLFields: []string{"url"}, Webhook: true}, "webhook: true needs url_fields"},
		"webhook no url":     {Route{Name: "move", Path: "/t", Webhook: true, Then: []string{"models"}}, "webhook: true needs url_fields"},
	} {
		tg := Target{Name: "gw", Kind: KindGateway, Gateway: []string{"gw", "--port", "{port}"},
			LLMGateway: &LLMGateway{Provision: []string{"provision"}, Routes: []Route{c.route, other}}}
		err := tg.Validate()
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), c.want, name)
	}
	ok := Target{Name: "gw", Kind: KindGateway, Gateway: []string{"gw", "--port", "{port}"},
		LLMGateway: &LLMGateway{Provision: []string{"provision"}, Routes: []Route{{Name: "move", Path: "/t", Then: []string{"models"}}, other}}}
	assert.NoError(t, ok.Validate())
}
