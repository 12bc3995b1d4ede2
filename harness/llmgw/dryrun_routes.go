package llmgw

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// dryReport is how the dry pass's extra steps report: ok, a note, or a
// failure (which ends the pass).
type dryReport struct {
	step func(name, format string, args ...any)
	note func(name, format string, args ...any)
	fail func(name, format string, args ...any) error
}

// dryStore reads the declared store once, after the tenants chatted:
// it must be readable, and each tenant's own secret must rest in a row it
// owns in a declared place (else the places are declared wrong). What
// the catalog would report is only noted.
func dryStore(ctx context.Context, g *Gateway, box *harness.Sandbox, r dryReport) error {
	st := g.spec.Store
	if st == nil {
		r.note("store", "the target declares no llm_gateway.store: the shared-store check will not run")
		return nil
	}
	chk, err := invariants.NewChecker(box.Set.Tenants)
	if err != nil {
		return r.fail("store", "%v", err)
	}
	root := func(p string) string { return strings.ReplaceAll(p, "{root}", box.Root) }
	s := invariants.Store{DB: root(st.SQLite), DataDir: root(st.DataDir), Scratch: box.Logs}
	for _, p := range st.Places {
		sp := invariants.StorePlace{Table: p.Table, Column: p.Column, OwnerColumn: p.OwnerColumn, Owners: map[string]string{}}
		for _, t := range box.Set.Tenants {
			if id := g.Access(t).IDs[p.OwnerID]; id != "" {
				sp.Owners[id] = t.Name
			}
		}
		s.Places = append(s.Places, sp)
	}
	fs, own := chk.StoreLeaks(ctx, s)
	leaks := 0
	for _, f := range fs {
		if f.Invariant == invariants.Harness {
			return r.fail("store", "%s: %s (is llm_gateway.store.sqlite right?)", s.DB, f.Detail)
		}
		leaks++
	}
	for _, t := range box.Set.Tenants {
		if !own[t.Name] {
			return r.fail("store", "%s: no row %s owns holds one of its secrets: are the places' table, column, owner_column and owner_id (ids %v) right?",
				s.DB, t.Name, g.Access(t).IDs)
		}
	}
	r.step("store", "%s read once: each tenant's own secret rests in a row it owns (%d place(s))", s.DB, len(st.Places))
	if leaks > 0 {
		r.note("store", "%d shared_store finding(s): the catalog will report them", leaks)
	}
	return nil
}

// dryRoutes calls each declared route once as its owner t, with t's own
// credentials and ids: the read routes first, then the others (a route
// that deletes comes last). A route the owner's answer does not count as
// a success for is a failure; a route whose ids t lacks is noted.
func dryRoutes(ctx context.Context, g *Gateway, t *tenants.Tenant, wait time.Duration, r dryReport) error {
	routes := append([]harness.Route(nil), g.spec.Routes...)
	sort.SliceStable(routes, func(i, j int) bool { return routes[i].Read && !routes[j].Read })
	a := g.Access(t)
	for _, route := range routes {
		if len(route.URLFields) > 0 {
			r.note("route", "%q: a URL-taking route: gateway-fetch probes it with the harness's own listener (a gateway that refuses internal URLs refuses its owner here)", route.Name)
			continue
		}
		if _, _, ok := FillRoute(route, a.IDs); !ok {
			r.note("route", "%q: %s has no id for one of {%s}: it is probed once the ids exist (a store place's id, say)",
				route.Name, t.Name, strings.Join(harness.RoutePlaceholders(route.Path+route.Body), "} {"))
			continue
		}
		if err := dryRoute(ctx, g, route, t, a, wait, r); err != nil {
			return err
		}
	}
	return nil
}

// dryRoute calls route as its owner t in each of its credential forms,
// until one answers as the route's success says, as gateway-routes'
// own-routes phase calls it. A read route whose every form that must
// work (AuthForm.MustWork) was refused fails the pass: its positive
// control would fail. A form the owner may be refused (own: any) and a
// route that is not a read (an admin route a common user must be
// refused, a write) are noted, refused or not: the catalog probes them
// cross-tenant only.
func dryRoute(ctx context.Context, g *Gateway, route harness.Route, t *tenants.Tenant, a harness.GatewayAccess, wait time.Duration, r dryReport) error {
	forms := route.CredentialForms()
	if len(forms) == 0 {
		forms = []harness.AuthForm{{Name: harness.FormNone}} // a route only ever called with none
	}
	var refused []string
	mustWork := false
	for _, form := range forms {
		call, why := RouteCall{Route: route, Form: form, Caller: a, Values: harness.NewRouteValues(a, a.IDs, a.IDs)}.Fill()
		if why != "" {
			r.note("route", "%q: %s cannot call it in its form %q: %s", route.Name, t.Name, form.Name, why)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, wait)
		rep, err := g.Send(cctx, call)
		cancel()
		if err != nil {
			return r.fail("route", "%q as its owner %s: %v", route.Name, t.Name, err)
		}
		if route.Succeeded(rep.Status, rep.Body) {
			r.step("route", "%q: %s %s answered its owner %s (HTTP %d, form %s)", route.Name, rep.Method, rep.Path, t.Name, rep.Status, formLabel(form))
			return dryChain(ctx, g, route, t, a, wait, r)
		}
		mustWork = mustWork || form.MustWork()
		refused = append(refused, fmt.Sprintf("form %s: %s %s: HTTP %d: %s", formLabel(form), rep.Method, rep.Path, rep.Status, trim(rep.Body)))
	}
	switch {
	case len(refused) == 0:
		return nil // no form could be filled: noted above
	case route.Read && mustWork:
		return r.fail("route", "%q as its owner %s: %s\n(is its path, auth or success right?)", route.Name, t.Name, strings.Join(refused, "; "))
	case route.Read:
		r.note("route", "%q: its owner %s was refused in every form, each one it may be refused (own: any): %s", route.Name, t.Name, strings.Join(refused, "; "))
	default:
		r.note("route", "%q: not a read: its owner %s was refused (%s); the catalog probes it cross-tenant only, where a refusal is what it must get", route.Name, t.Name, strings.Join(refused, "; "))
	}
	return nil
}

// dryExtras are the dry pass's steps after the chats: the store read
// once, then each route once as its owner.
func dryExtras(ctx context.Context, g *Gateway, box *harness.Sandbox, wait time.Duration, r dryReport) error {
	if err := dryStore(ctx, g, box, r); err != nil {
		return err
	}
	if len(g.spec.Routes) == 0 {
		return nil
	}
	return dryRoutes(ctx, g, box.Set.Tenants[0], wait, r)
}

// formLabel names a credential form in a report; the default form (no
// auth given) is "default".
func formLabel(f harness.AuthForm) string {
	if f.Name == "" {
		return "default"
	}
	return f.Name
}

// dryChain calls the routes route chains (then) as its owner t, with its
// own credentials (the first form it can fill) and ids, as gateway-routes
// does after t's own call: each must answer as its success says (the
// catalog's control of the chain), or the pass fails; one t cannot fill
// (an id or a credential captured later) is noted.
func dryChain(ctx context.Context, g *Gateway, route harness.Route, t *tenants.Tenant, a harness.GatewayAccess, wait time.Duration, r dryReport) error {
	for _, next := range harness.ChainedRoutes(g.spec.Routes, route) {
		call, _, why := OwnCall(next, a, harness.NewRouteValues(a, a.IDs, a.IDs))
		if why != "" {
			r.note("route", "%q then %q: %s cannot call it yet: %s (the catalog calls it once the values exist)", route.Name, next.Name, t.Name, why)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, wait)
		rep, err := g.Send(cctx, call)
		cancel()
		if err != nil {
			return r.fail("route", "%q then %q as its owner %s: %v", route.Name, next.Name, t.Name, err)
		}
		if !next.Succeeded(rep.Status, rep.Body) {
			return r.fail("route", "%q then %q: the chained route refused its owner %s: %s %s: HTTP %d: %s\n(every call of a chain must answer its caller: is its path, auth or success right?)",
				route.Name, next.Name, t.Name, rep.Method, rep.Path, rep.Status, trim(rep.Body))
		}
		r.step("route", "%q then %q: %s %s answered its owner %s (HTTP %d)", route.Name, next.Name, rep.Method, rep.Path, t.Name, rep.Status)
	}
	return nil
}
