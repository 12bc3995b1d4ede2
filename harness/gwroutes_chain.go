package harness

import (
	"fmt"
	"slices"
	"strings"
)

// Chains across routes (issue 49). A route's `then` names routes the
// caller calls next with its own credentials and ids: in gateway-routes
// after each call of the route (its owner's own, and each cross-tenant
// probe), in gateway-fetch after the URL the route stored (a fetch
// trigger). A capture listed in `capture_secrets` is a credential the
// route minted: the caller's own for later routes, and its secret canary.
//
//	- name: move my token to a group
//	  method: PUT
//	  path: "/api/token/{own.token_id}/group"
//	  body: '{"group_id": {group_id}}'
//	  then: [models by my key]
//	- {name: models by my key, path: /v1/models, auth: key, success: '"object"'}

// ChainedRoutes are the routes r's Then names, in order, from routes; a
// name no route has is left out (validation refuses it).
func ChainedRoutes(routes []Route, r Route) []Route {
	var out []Route
	for _, name := range r.Then {
		if i := slices.IndexFunc(routes, func(x Route) bool { return x.Name == name }); i >= 0 {
			out = append(out, routes[i])
		}
	}
	return out
}

// validateChains checks then, capture_secrets and webhook of every route:
// a then naming no route (or the route itself, or twice), a secret that is
// no capture, a webhook without url_fields and a then is refused, naming
// the field.
func (g *LLMGateway) validateChains() []error {
	var errs []error
	names := make([]string, 0, len(g.Routes))
	for _, r := range g.Routes {
		names = append(names, r.Name)
	}
	for i, r := range g.Routes {
		where := fmt.Sprintf("llm_gateway.routes[%d] (%s)", i, r.Name)
		seen := map[string]bool{}
		for j, name := range r.Then {
			switch {
			case name == r.Name:
				errs = append(errs, fmt.Errorf("%s: then[%d] %q: a route cannot follow itself", where, j, name))
			case seen[name]:
				errs = append(errs, fmt.Errorf("%s: then[%d] %q: listed twice", where, j, name))
			case !slices.Contains(names, name):
				errs = append(errs, fmt.Errorf("%s: then[%d] %q: no route of that name (routes: %s)", where, j, name, strings.Join(names, ", ")))
			}
			seen[name] = true
		}
		for j, name := range r.CaptureSecrets {
			if _, ok := r.Capture[name]; !ok {
				errs = append(errs, fmt.Errorf("%s: capture_secrets[%d] %q: not one of the route's captures", where, j, name))
			}
		}
		if r.Webhook && (len(r.URLFields) == 0 || len(r.Then) == 0) {
			errs = append(errs, fmt.Errorf("%s: webhook: true needs url_fields (where the URL is stored) and then (the route that makes the gateway call it)", where))
		}
	}
	return errs
}
