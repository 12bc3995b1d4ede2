package scenarios

import (
	"fmt"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/llmgw"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Fetches made later, on another route: a route stores a URL (a webhook,
// an avatar), the routes its `then` names make the gateway fetch it. Each
// tenant stores a listener URL of its own; then each tenant in turn calls
// the trigger with its own credentials. A fetch of another tenant's URL
// while a tenant's trigger is answered (or awaited) is that fetch made on
// the tenant's behalf; a request on any tenant's URL carrying another
// tenant's data, or a trigger's answer carrying it, is a Fetch finding
// too. A route marked webhook is meant to call its URL: the fetch of the
// caller's own URL on its own trigger is then expected, a positive
// control, so a trigger that stopped fetching cannot pass.

// storedURL is one listener URL a tenant gave on a route's url field.
type storedURL struct {
	t     *tenants.Tenant
	route harness.Route
	field string
	url   string
}

// webhookWithin is how long a webhook's fetch of its owner's URL is
// awaited after its trigger answered.
const webhookWithin = 15 * time.Second

// thenPlace is the Place of a fetch trigger's findings: the route that
// stored the URL and the routes that make the gateway fetch it.
func thenPlace(r harness.Route) string {
	return fmt.Sprintf("route %q then %q", r.Name, strings.Join(r.Then, `", "`))
}

// GatewayFetchTriggers calls, for each route with url_fields and then,
// each tenant's triggers once every tenant's URL is stored (stored), and
// judges the fetches the listener l saw meanwhile.
func (e *Env) GatewayFetchTriggers(g *llmgw.Gateway, l *llmgw.FetchListener, stored []storedURL) {
	e.T.Helper()
	chk := e.routeChecker()
	routes := g.Spec().Routes
	for _, r := range routes {
		if len(r.Then) == 0 || len(r.URLFields) == 0 {
			continue
		}
		place := thenPlace(r)
		for _, t := range e.Tenants {
			var own []storedURL
			for _, s := range stored {
				if s.t == t && s.route.Name == r.Name {
					own = append(own, s)
				}
			}
			if len(own) == 0 {
				continue // t could not store one (ids it lacks)
			}
			mark := len(l.Hits())
			for _, next := range harness.ChainedRoutes(routes, r) {
				e.fetchTrigger(g, chk, r, next, t)
			}
			if r.Webhook {
				e.awaitOwnFetch(l, r, t, own, mark)
			}
			for _, h := range l.Hits()[mark:] {
				for _, s := range stored {
					if s.t == t || strings.TrimPrefix(s.url, l.Base()) != h.Path {
						continue
					}
					e.Find(invariants.Finding{Invariant: invariants.Fetch, Tenant: s.t.Name, Owner: t.Name, Kind: RouteRequest, Place: place,
						Where: invariants.Where{Label: place, Method: r.Method, Path: s.route.Path, Part: "url field " + s.field},
						Detail: fmt.Sprintf("%s's URL stored through route %q was fetched (%s %s) while %s's call of %s was answered: a fetch made on %s's behalf",
							s.t.Name, r.Name, h.Method, h.Path, t.Name, strings.Join(r.Then, ", "), t.Name)})
				}
			}
		}
	}
}

// fetchTrigger calls next, the trigger of the URL t stored through r, as
// t with its own credentials and ids: it must answer (a control), and its
// answer may carry no other tenant's data (a Fetch finding: another
// tenant's listener answer, say).
func (e *Env) fetchTrigger(g *llmgw.Gateway, chk *invariants.Checker, r, next harness.Route, t *tenants.Tenant) {
	e.T.Helper()
	name := fmt.Sprintf("fetch trigger %q answers after %q", next.Name, r.Name)
	acc := g.Access(t)
	ids := e.idsOf(t)
	filled, form, why := llmgw.OwnCall(next, acc, harness.NewRouteValues(acc, ids, ids))
	if why != "" {
		e.gatewayControl(t, name, false, why)
		return
	}
	rep := e.sendRoute(g, next, filled, fmt.Sprintf("fetch trigger %q of %s", next.Name, t.Name))
	e.gatewayControl(t, name, next.Succeeded(rep.Status, rep.Body), fmt.Sprintf("%s %s: HTTP %d: %s", rep.Method, rep.Path, rep.Status, excerpt(rep.Body)))
	place := thenPlace(r)
	for _, lk := range chk.TextLeaks(fmt.Sprintf("%s to %s", place, t.Name), rep.Body, t.Name) {
		e.Find(invariants.Finding{Invariant: invariants.Fetch, Tenant: t.Name, Owner: lk.Owner, Kind: lk.Kind, Encoding: lk.Encoding, Place: place,
			Where:   invariants.Where{Label: place, Method: rep.Method, Path: rep.Path},
			Detail:  fmt.Sprintf("the answer to %s's call of route %q (%s), the trigger of the URL it stored through %q, carries another tenant's data (HTTP %d)", t.Name, next.Name, formWords(form, ""), r.Name, rep.Status),
			Excerpt: lk.Excerpt})
	}
}

// awaitOwnFetch waits until the listener saw a request on one of t's own
// URLs stored through the webhook route r since mark: the control that the
// trigger made the gateway call it.
func (e *Env) awaitOwnFetch(l *llmgw.FetchListener, r harness.Route, t *tenants.Tenant, own []storedURL, mark int) {
	e.T.Helper()
	paths := map[string]bool{}
	for _, s := range own {
		paths[strings.TrimPrefix(s.url, l.Base())] = true
	}
	ctx, cancel := e.ctx(webhookWithin + 5*time.Second)
	defer cancel()
	err := Await(ctx, Wait{What: fmt.Sprintf("a request on %s's URL stored through route %q", t.Name, r.Name), Within: webhookWithin, Poll: 50 * time.Millisecond},
		func() (bool, string) {
			hits := l.Hits()[mark:]
			for _, h := range hits {
				if paths[h.Path] {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d request(s) on the listener since the trigger, none on %s's URL", len(hits), t.Name)
		})
	detail := ""
	if err != nil {
		detail = err.Error()
	}
	e.gatewayControl(t, fmt.Sprintf("webhook stored through %q is called on its owner's trigger", r.Name), err == nil, detail)
}

// fetchRequestFindings: every request the gateway made to a tenant's
// listener URL may carry none of another tenant's data (its query,
// headers and body): a Fetch finding otherwise.
func (e *Env) fetchRequestFindings(l *llmgw.FetchListener, stored []storedURL) {
	e.T.Helper()
	chk := e.routeChecker()
	for _, s := range stored {
		// A place of its own: a request that carried another tenant's
		// data is told apart from one made on its behalf (FoldText).
		place := fmt.Sprintf("the gateway's request on a URL stored through route %q", s.route.Name)
		for _, h := range l.HitsOn(s.url) {
			for _, lk := range chk.TextLeaks(fmt.Sprintf("request on %s's URL of %s", s.t.Name, place), h.Content(), s.t.Name) {
				e.Find(invariants.Finding{Invariant: invariants.Fetch, Tenant: s.t.Name, Owner: lk.Owner, Kind: lk.Kind, Encoding: lk.Encoding, Place: place,
					Where:   invariants.Where{Label: place, Method: s.route.Method, Path: s.route.Path, Part: "url field " + s.field},
					Detail:  fmt.Sprintf("the request the gateway made to %s's URL (%s %s), stored through route %q, carries another tenant's data", s.t.Name, h.Method, h.Path, s.route.Name),
					Excerpt: lk.Excerpt})
			}
		}
	}
}
