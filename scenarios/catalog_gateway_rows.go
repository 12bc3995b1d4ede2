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

// maxRowsProbed caps how many of another tenant's rows of one place each
// caller asks for, per route.
const maxRowsProbed = 3

// GatewayOwnerRows probes the routes that serve one row of a store place
// declaring id_column and id ({<id>_id}): after traffic, the store is read
// for every row's identifier and owner. Each tenant asks for its own
// latest row (a read route must answer it: the positive control), then
// for rows of every other tenant, by their exact identifiers (never a
// guessed neighbour, which may be the caller's own row): a success, or
// another tenant's canary in the answer, is an Authz finding.
func (e *Env) GatewayOwnerRows() {
	e.T.Helper()
	g := e.llmGateway()
	st := g.Spec().Store
	if st == nil {
		return
	}
	ts := e.Box.Set.Tenants
	chk := e.checker(ts)
	root := func(p string) string { return strings.ReplaceAll(p, "{root}", e.Box.Root) }
	s := invariants.Store{DB: root(st.SQLite), DataDir: root(st.DataDir), Scratch: e.Box.Logs}
	for _, p := range st.Places {
		if p.ID == "" {
			continue
		}
		ph := p.ID + "_id"
		var routes []harness.Route
		for _, r := range g.Spec().Routes {
			for _, x := range harness.RoutePlaceholders(r.Path + r.Body) {
				if x == ph && r.Read {
					routes = append(routes, r)
					break
				}
			}
		}
		if len(routes) == 0 {
			continue
		}
		ctx, cancel := e.ctx(30 * time.Second)
		byOwner, err := invariants.StoreRowIDs(ctx, s, p.Table, p.IDColumn, p.OwnerColumn)
		cancel()
		if err != nil {
			e.T.Fatalf("store place %s: %v", p.Table, err)
		}
		rowsOf := map[string][]string{} // tenant -> its row ids, oldest first
		for _, t := range ts {
			if id := g.Access(t).IDs[p.OwnerID]; id != "" && g.Offboarded(t) == "" {
				rowsOf[t.Name] = byOwner[id]
			}
		}
		for _, r := range routes {
			for _, a := range e.Tenants {
				own := rowsOf[a.Name]
				if len(own) == 0 {
					e.gatewayControl(a, fmt.Sprintf("own rows of %s in the store for route %q", p.Table, r.Name), false,
						fmt.Sprintf("no row of %s has %s = its %s id", p.Table, p.OwnerColumn, p.OwnerID))
					continue
				}
				e.ownerRowCall(g, chk, r, a, a, ph, own[len(own)-1])
				for _, o := range e.Shuffled(e.Tenants) {
					if o == a {
						continue
					}
					theirs := rowsOf[o.Name]
					if len(theirs) > maxRowsProbed {
						theirs = theirs[len(theirs)-maxRowsProbed:]
					}
					for _, id := range theirs {
						e.ownerRowCall(g, chk, r, a, o, ph, id)
					}
				}
			}
		}
	}
}

// ownerRowCall calls read route r as a, with a's own ids and the row id
// (placeholder ph) of owner's row: answered when owner is a (a control),
// refused with none of owner's data otherwise.
func (e *Env) ownerRowCall(g *llmgw.Gateway, chk *invariants.Checker, r harness.Route, a, owner *tenants.Tenant, ph, id string) {
	e.T.Helper()
	ids := map[string]string{}
	for k, v := range g.Access(a).IDs {
		ids[k] = v
	}
	ids[strings.TrimSuffix(ph, "_id")] = id
	ctx, cancel := e.ctx(30 * time.Second)
	rep, ok, err := g.CallRoute(ctx, r, g.Access(a), ids)
	cancel()
	if err != nil {
		e.T.Fatalf("route %q of %s naming %s's row %s: %v", r.Name, a.Name, owner.Name, id, err)
	}
	if !ok {
		return
	}
	label := fmt.Sprintf("route %q (%s %s) to %s naming %s's row %s", r.Name, rep.Method, rep.Path, a.Name, owner.Name, id)
	e.KeepText(a, label, rep.Body)
	if owner == a {
		e.gatewayControl(a, fmt.Sprintf("own row answers on route %q", r.Name), r.Succeeded(rep.Status, rep.Body),
			fmt.Sprintf("%s %s: HTTP %d: %s", rep.Method, rep.Path, rep.Status, excerpt(rep.Body)))
		return
	}
	where := invariants.Where{Label: fmt.Sprintf("route %q", r.Name), Method: rep.Method, Path: r.Path}
	if r.Succeeded(rep.Status, rep.Body) {
		e.Find(invariants.Finding{Invariant: invariants.Authz, Tenant: a.Name, Owner: owner.Name, Where: where,
			Detail: fmt.Sprintf("%s's credentials with %s's row %s (an owner-only row of the store) were not refused: HTTP %d", a.Name, owner.Name, id, rep.Status), Excerpt: excerpt(rep.Body)})
	}
	for _, f := range chk.TextLeaks(label, rep.Body, a.Name) {
		e.Find(invariants.Finding{Invariant: invariants.Authz, Tenant: a.Name, Owner: f.Owner, Kind: f.Kind, Where: where,
			Detail: fmt.Sprintf("the answer to %s's credentials with %s's row %s carries another tenant's data (HTTP %d)", a.Name, owner.Name, id, rep.Status), Excerpt: f.Excerpt})
		break
	}
}
