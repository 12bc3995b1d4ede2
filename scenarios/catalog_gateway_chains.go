package scenarios

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/llmgw"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/invariants/scan"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Chains across routes (harness.Route.Then): after a call of a route,
// the caller calls the routes its `then` names with its own credentials
// and ids, and what those answer is judged as any route's answer. A write
// on the caller's own object that names another tenant's id (my token,
// your group) may be answered as refused and still take effect; the later
// read with the caller's own key is where it shows (your group's models).
// Every chained call must answer its caller (a positive control: a chain
// that stopped running cannot pass), and after a cross-tenant probe the
// route is called once more with the caller's own ids, so what the probe
// changed is put back before the next one.

// chainPlace is the Place of a chain's findings: the route and the route
// it was followed by.
func chainPlace(route, next harness.Route) string {
	return fmt.Sprintf("route %q then %q", route.Name, next.Name)
}

// adoptCaptured makes a credential t captured on route (capture name) one
// of t's secret canaries (kind gateway_credential, with and without an
// sk- prefix, as gateways store keys), when it is long enough to scan for.
func (e *Env) adoptCaptured(t *tenants.Tenant, route harness.Route, name, value string) {
	if len(value) < scan.MinValueLen*2 {
		e.gatewayControl(t, fmt.Sprintf("own route %q captures secret %s", route.Name, name), false,
			fmt.Sprintf("the captured value has %d characters: too short to tell from chance (a secret needs %d)", len(value), scan.MinValueLen*2))
		return
	}
	for _, v := range []string{value, strings.TrimPrefix(value, "sk-")} {
		if len(v) < scan.MinValueLen*2 {
			continue
		}
		if _, err := t.Adopt(tenants.GatewayCredential, v); err != nil {
			e.T.Fatalf("route %q: capture %s of %s: %v", route.Name, name, t.Name, err)
		}
	}
}

// routeChainStep is one call of a chained route: whether it ran, and why not.
type routeChainStep struct {
	ran, ok bool
	detail  string
}

// routeChainCall calls next as a, with a's own credentials (its first form that
// can be filled) and ids, after the call described by after: another
// tenant's data in the answer, or a request on another tenant's provider,
// is an Authz finding at the chain's place.
func (e *Env) routeChainCall(g *llmgw.Gateway, chk *invariants.Checker, route, next harness.Route, a *tenants.Tenant, after string) routeChainStep {
	e.T.Helper()
	if _, up := e.routeBase(g, next); !up {
		return routeChainStep{detail: fmt.Sprintf("route %q: its backend is not running", next.Name)}
	}
	acc := g.Access(a)
	ids := e.idsOf(a)
	filled, form, why := llmgw.OwnCall(next, acc, harness.NewRouteValues(acc, ids, ids))
	if why != "" {
		return routeChainStep{detail: fmt.Sprintf("route %q cannot be called by %s: %s", next.Name, a.Name, why)}
	}
	place := chainPlace(route, next)
	how := fmt.Sprintf("after %s, %s's own call of route %q (%s)", after, a.Name, next.Name, formWords(form, ""))
	ts := e.Box.Set.Tenants
	before := invariants.Counts(ts)
	r := e.sendRoute(g, next, filled, fmt.Sprintf("route %q of %s after route %q", next.Name, a.Name, route.Name))
	e.droveAt(place, a.Name, how, r, before, invariants.Counts(ts))
	for _, f := range dataFindingsAt(chk, place, a.Name, fmt.Sprintf("%s to %s", place, a.Name), "the answer "+how, r) {
		e.Find(f)
	}
	ok := next.Succeeded(r.Status, r.Body)
	return routeChainStep{ran: true, ok: ok, detail: fmt.Sprintf("%s %s: HTTP %d: %s", r.Method, r.Path, r.Status, excerpt(r.Body))}
}

// ownChain runs route's chain after t's own call of it (how): each
// chained route must answer t (a positive control).
func (e *Env) ownChain(g *llmgw.Gateway, chk *invariants.Checker, route harness.Route, t *tenants.Tenant, how string) {
	e.T.Helper()
	for _, next := range harness.ChainedRoutes(g.Spec().Routes, route) {
		s := e.routeChainCall(g, chk, route, next, t, how)
		e.gatewayControl(t, fmt.Sprintf("chain %q then %q answers after its own call", route.Name, next.Name), s.ran && s.ok, s.detail)
	}
}

// crossChains counts the chained calls after the cross-tenant probes, by
// tenant and chain, for their controls.
type crossChains map[string]*chainCount

type chainCount struct {
	t           *tenants.Tenant
	route, next string
	ran, failed int
	detail      string
}

// after runs route's chain as a after one cross-tenant probe (how), then
// calls route once more with a's own ids (not a DELETE): whatever the
// probe changed on a's own object is put back before the next probe.
func (c crossChains) after(e *Env, g *llmgw.Gateway, chk *invariants.Checker, route harness.Route, a *tenants.Tenant, how string) {
	e.T.Helper()
	if len(route.Then) == 0 {
		return
	}
	for _, next := range harness.ChainedRoutes(g.Spec().Routes, route) {
		key := a.Name + "\x00" + route.Name + "\x00" + next.Name
		n := c[key]
		if n == nil {
			n = &chainCount{t: a, route: route.Name, next: next.Name}
			c[key] = n
		}
		s := e.routeChainCall(g, chk, route, next, a, how)
		if s.ran {
			n.ran++
		}
		if !s.ran || !s.ok {
			n.failed++
			if n.detail == "" {
				n.detail = s.detail
			}
		}
	}
	if route.Method == http.MethodDelete {
		return
	}
	acc := g.Access(a)
	ids := e.idsOf(a)
	if filled, _, why := llmgw.OwnCall(route, acc, harness.NewRouteValues(acc, ids, ids)); why == "" {
		e.sendRoute(g, route, filled, fmt.Sprintf("route %q of %s, put back with its own ids", route.Name, a.Name))
	}
}

// controls records, per tenant and chain, that the chain ran after the
// cross-tenant probes and each chained call answered its caller. A route
// with a chain that names other tenants' ids but was never probed for a
// tenant fails the control too: a chain that stopped running cannot pass.
func (c crossChains) controls(e *Env, g *llmgw.Gateway) {
	for _, route := range g.Spec().Routes {
		if _, up := e.routeBase(g, route); !up || !route.NamesForeignIDs() {
			continue
		}
		for _, next := range harness.ChainedRoutes(g.Spec().Routes, route) {
			for _, t := range e.Tenants {
				name := fmt.Sprintf("chain %q then %q answers after each cross-tenant probe", route.Name, next.Name)
				n := c[t.Name+"\x00"+route.Name+"\x00"+next.Name]
				switch {
				case n == nil || n.ran == 0:
					e.gatewayControl(t, name, false, fmt.Sprintf("no cross-tenant probe of route %q was made for %s: the chain never ran", route.Name, t.Name))
				case n.failed > 0:
					e.gatewayControl(t, name, false, fmt.Sprintf("%d of %d chained call(s) did not answer: %s", n.failed, n.ran, n.detail))
				default:
					e.gatewayControl(t, name, true, "")
				}
			}
		}
	}
}
