package scenarios

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/llmgw"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// The route probes of gateway-routes: every declared route in each of its
// credential forms (harness.AuthForm) and query variants, as its owner,
// anonymously, and with one tenant's credentials naming another tenant's
// ids; routes with a capture chain their answers' ids into later routes.
// Every finding of a route names it as its Place, so a hole the route
// shows to many calls is one finding per caller and owner, with a count.

// Anonymous is the Tenant of a finding made by a call with no
// credentials: no tenant's place, so in parentheses, as the certificate's
// other non-tenant places.
const Anonymous = "(anonymous)" // certificate.PlaceAnonymous (TestReachHasAnAnonymousColumn)

// The Kinds of route findings that carry no canary: the call named the
// owner's ids (RouteIDs), or the owner's call drove the tenant's provider
// (RouteRequest).
const (
	RouteIDs     tenants.Kind = "ids"
	RouteRequest tenants.Kind = "request"
)

// routeState is what the route probes learnt: each tenant's captured ids,
// and the ids a caller made while naming another tenant's.
type routeState struct {
	mu       sync.Mutex
	captured map[string]map[string]string // tenant -> name -> value
	made     map[string]map[string]string // caller "\x00" named -> name -> value
}

func (s *routeState) capture(tenant, pair string, name, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.captured == nil {
		s.captured, s.made = map[string]map[string]string{}, map[string]map[string]string{}
	}
	m := s.captured
	key := tenant
	if pair != "" {
		m, key = s.made, pair
	}
	if m[key] == nil {
		m[key] = map[string]string{}
	}
	m[key][name] = value
}

func (s *routeState) capturedOf(tenant string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return writableCopy(s.captured[tenant])
}

func (s *routeState) madeBy(caller, named string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return writableCopy(s.made[caller+"\x00"+named])
}

// madeValues are every value caller captured, as its owner or naming
// another tenant: a guess never names one of them.
func (s *routeState) madeValues(caller string) map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]bool{}
	for _, v := range s.captured[caller] {
		out[v] = true
	}
	for k, m := range s.made {
		if strings.HasPrefix(k, caller+"\x00") {
			for _, v := range m {
				out[v] = true
			}
		}
	}
	return out
}

func (e *Env) routes() *routeState {
	e.T.Helper()
	return &e.startedGatewayRun().routes
}

// idsOf are t's ids: the provisioner's, then the captured ones under names
// it did not give.
func (e *Env) idsOf(t *tenants.Tenant) map[string]string {
	ids := e.routes().capturedOf(t.Name)
	for k, v := range e.llmGateway().Access(t).IDs {
		ids[k] = v
	}
	return ids
}

// routePlace is a route's Place and Where.Label.
func routePlace(r harness.Route) string { return fmt.Sprintf("route %q", r.Name) }

// formWords says in which form and variant a call was made.
func formWords(f harness.AuthForm, query string) string {
	name := f.Name
	if name == "" {
		name = "default"
	}
	s := "auth " + name
	if query != "" {
		s += ", variant " + query
	}
	return s
}

// ownControlName is the positive control of the owner's own call of a
// read route in one form and variant: the first form as declared keeps
// the name it always had.
func ownControlName(r harness.Route, first bool, f harness.AuthForm, query string) string {
	if first && query == "" {
		return fmt.Sprintf("own route %q answers", r.Name)
	}
	return fmt.Sprintf("own route %q answers (%s)", r.Name, formWords(f, query))
}

// routeChecker compiles every tenant's canaries for the route probes.
func (e *Env) routeChecker() *invariants.Checker {
	e.T.Helper()
	return e.checker(e.Box.Set.Tenants)
}

// startRouteBackends starts the serve backend when a route is served by
// it (an agent server's dashboard and websocket port), or says why its
// routes are not probed.
func (e *Env) startRouteBackends(routes []harness.Route) {
	e.T.Helper()
	for _, r := range routes {
		if !r.OnServe() || e.Server != nil {
			continue
		}
		if ok, why := e.Box.Target.Supports(harness.BackendServe); !ok {
			e.skip(string(Authz), fmt.Sprintf("route %q is served by the serve backend: %s", r.Name, why))
			return
		}
		e.StartServe()
		return
	}
}

// routeBase is the base URL of the backend that serves route; ok is
// false when that backend is not running.
func (e *Env) routeBase(g *llmgw.Gateway, route harness.Route) (base string, ok bool) {
	if !route.OnServe() {
		return g.Base(), true
	}
	if e.Server == nil {
		return "", false
	}
	return e.Server.Base, true
}

// sendRoute makes one filled call of route, failing the scenario when
// its backend cannot be reached.
func (e *Env) sendRoute(g *llmgw.Gateway, route harness.Route, f llmgw.Filled, what string) llmgw.Reply {
	e.T.Helper()
	base, ok := e.routeBase(g, route)
	if !ok {
		e.T.Fatalf("%s: the serve backend is not running", what)
	}
	ctx, cancel := e.ctx(30 * time.Second)
	defer cancel()
	r, err := g.SendAt(ctx, base, f)
	if err != nil {
		e.T.Fatalf("%s: %v", what, err)
	}
	return r
}

// dataFindings are the authz findings of another tenant's data (canaries
// not the caller's) in the answer r to caller (a tenant, or Anonymous).
func dataFindings(chk *invariants.Checker, route harness.Route, caller, label, how string, r llmgw.Reply) []invariants.Finding {
	return dataFindingsAt(chk, routePlace(route), caller, label, "the answer to "+how, r)
}

// dataFindingsAt are dataFindings at place (a route, or a chain of
// routes), what saying whose answer it was.
func dataFindingsAt(chk *invariants.Checker, place, caller, label, what string, r llmgw.Reply) []invariants.Finding {
	var out []invariants.Finding
	for _, l := range chk.TextLeaks(label, r.Body, caller) {
		out = append(out, invariants.Finding{Invariant: invariants.Authz, Tenant: caller, Owner: l.Owner, Kind: l.Kind, Encoding: l.Encoding,
			Place: place, Where: invariants.Where{Label: place, Method: r.Method, Path: r.Path},
			Detail: fmt.Sprintf("%s carries another tenant's data (HTTP %d)", what, r.Status), Excerpt: l.Excerpt})
	}
	return out
}

// drove are the authz findings of a call that drove the providers of
// tenants other than the caller: owner is the caller.
func (e *Env) drove(route harness.Route, caller, how string, r llmgw.Reply, before, after map[string]int) {
	e.droveAt(routePlace(route), caller, how, r, before, after)
}

// droveAt is drove at place (a route, or a chain of routes).
func (e *Env) droveAt(place, caller, how string, r llmgw.Reply, before, after map[string]int) {
	for _, x := range e.Box.Set.Tenants {
		if x.Name == caller {
			continue
		}
		if n := after[x.Name] - before[x.Name]; n > 0 {
			e.Find(invariants.Finding{Invariant: invariants.Authz, Tenant: x.Name, Owner: caller, Kind: RouteRequest,
				Place: place, Where: invariants.Where{Label: place, Method: r.Method, Path: r.Path},
				Detail: fmt.Sprintf("%s drove %d request(s) to its provider (HTTP %d)", how, n, r.Status)})
		}
	}
}

// GatewayOwnRoutes: each tenant calls, as the owner, every read route in
// each of its credential forms and query variants, and every route with
// a capture once (its first form): each call must succeed (a positive
// control; a form with own: any need not), no answer may carry another
// tenant's data, no call may drive another tenant's provider, and each
// capture's value becomes the tenant's id for later routes. A route with
// a then is called once too, and its chain after it (ownChain). Routes
// are taken in their declared order.
func (e *Env) GatewayOwnRoutes() {
	e.T.Helper()
	g := e.llmGateway()
	st := e.routes()
	chk := e.routeChecker()
	ts := e.Box.Set.Tenants
	e.startRouteBackends(g.Spec().Routes)
	for _, route := range g.Spec().Routes {
		if _, up := e.routeBase(g, route); !up || (!route.Read && len(route.Capture) == 0 && len(route.Then) == 0) {
			continue
		}
		forms, queries := route.CredentialForms(), route.Queries()
		if len(forms) == 0 {
			forms = []harness.AuthForm{{Name: harness.FormNone}} // a capture anyone may make
		}
		if !route.Read {
			forms, queries = forms[:1], queries[:1]
		}
		for _, t := range e.Tenants {
			a := g.Access(t)
			ids := e.idsOf(t)
			for fi, f := range forms {
				for _, q := range queries {
					name := ownControlName(route, fi == 0, f, q)
					call := llmgw.RouteCall{Route: route, Form: f, Query: q, Caller: a, Values: harness.NewRouteValues(a, ids, ids)}
					filled, why := call.Fill()
					if why != "" {
						if strings.HasSuffix(strings.TrimSuffix(why, "}"), "_id") {
							continue // an id this tenant lacks: not its route
						}
						if f.MustWork() {
							e.gatewayControl(t, name, false, why)
						}
						continue
					}
					how := fmt.Sprintf("%s's own call (%s)", t.Name, formWords(f, q))
					before := invariants.Counts(ts)
					r := e.sendRoute(g, route, filled, fmt.Sprintf("route %q of %s (%s)", route.Name, t.Name, formWords(f, q)))
					after := invariants.Counts(ts)
					e.drove(route, t.Name, how, r, before, after)
					ok := route.Succeeded(r.Status, r.Body)
					if f.MustWork() {
						e.gatewayControl(t, name, ok, fmt.Sprintf("%s %s: HTTP %d: %s", r.Method, r.Path, r.Status, excerpt(r.Body)))
					}
					for _, fd := range dataFindings(chk, route, t.Name, fmt.Sprintf("route %q to %s", route.Name, t.Name), how, r) {
						e.Find(fd)
					}
					if fi == 0 && q == "" {
						e.captureAnswer(st, route, t, "", r, ok)
						e.ownChain(g, chk, route, t, how)
					}
				}
			}
		}
	}
}

// captureAnswer reads route's captures from the answer r to t: as its
// own ids (pair ""), or as ids it made naming another tenant's (pair
// caller\x00named). An owner's capture that fails is a failed control.
func (e *Env) captureAnswer(st *routeState, route harness.Route, t *tenants.Tenant, pair string, r llmgw.Reply, ok bool) {
	names := make([]string, 0, len(route.Capture))
	for n := range route.Capture {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		v, err := "", error(nil)
		if ok {
			p, perr := harness.ParseCapturePath(route.Capture[n])
			if perr != nil {
				err = perr
			} else {
				v, err = p.Find(r.Body)
			}
		}
		if ok && err == nil {
			st.capture(t.Name, pair, n, v)
			if pair == "" && slices.Contains(route.CaptureSecrets, n) {
				e.adoptCaptured(t, route, n, v)
			}
		}
		if pair == "" {
			detail := fmt.Sprintf("%s %s: HTTP %d: %s", r.Method, r.Path, r.Status, excerpt(r.Body))
			if ok && err != nil {
				detail = fmt.Sprintf("%s at %s: %v", n, route.Capture[n], err)
			}
			e.gatewayControl(t, fmt.Sprintf("own route %q captures %s", route.Name, n), ok && err == nil, detail)
		}
	}
}

// GatewayAnonymousRoutes: every route, in each query variant, with no
// credentials: naming each tenant's ids when it names any, else once. A
// success on a route not marked public, any tenant's data in the answer,
// or a request on any provider is an authz finding.
func (e *Env) GatewayAnonymousRoutes() {
	e.T.Helper()
	g := e.llmGateway()
	chk := e.routeChecker()
	ts := e.Box.Set.Tenants
	none := harness.AuthForm{Name: harness.FormNone}
	for _, route := range g.Spec().Routes {
		if _, up := e.routeBase(g, route); !up {
			continue
		}
		named := []*tenants.Tenant{nil}
		if route.NamesIDs() {
			named = e.Tenants
		}
		called := map[string]bool{}
		for _, o := range named {
			values := harness.RouteValues{}
			owner, whose := "", ""
			if o != nil {
				ids := e.idsOf(o)
				values = harness.NewRouteValues(harness.GatewayAccess{}, ids, ids)
				owner, whose = o.Name, " naming "+o.Name+"'s ids"
			}
			for _, q := range route.Queries() {
				filled, why := llmgw.RouteCall{Route: route, Form: none, Query: q, Values: values}.Fill()
				if why != "" || called[filled.Key()] {
					continue
				}
				called[filled.Key()] = true
				variant := ""
				if q != "" {
					variant = ", variant " + q
				}
				how := fmt.Sprintf("an anonymous call (no credentials%s)%s", variant, whose)
				before := invariants.Counts(ts)
				r := e.sendRoute(g, route, filled, fmt.Sprintf("route %q, anonymous", route.Name))
				after := invariants.Counts(ts)
				where := invariants.Where{Label: routePlace(route), Method: r.Method, Path: r.Path}
				if !route.Public && route.Succeeded(r.Status, r.Body) {
					f := invariants.Finding{Invariant: invariants.Authz, Tenant: Anonymous, Owner: owner, Place: routePlace(route), Where: where,
						Detail: fmt.Sprintf("%s was not refused: HTTP %d (a route anyone may call: public: true)", how, r.Status), Excerpt: excerpt(r.Body)}
					if owner != "" {
						f.Kind = RouteIDs
					}
					e.Find(f)
				}
				for _, fd := range dataFindings(chk, route, Anonymous, fmt.Sprintf("route %q, anonymous", route.Name), how, r) {
					e.Find(fd)
				}
				e.drove(route, Anonymous, how, r, before, after)
			}
		}
	}
}

// GatewayCrossRoutes: every route that names another tenant's ids (in its
// path, body, variants or credential forms), called by each tenant in
// each of its forms and variants, naming every other tenant's ids and
// their guessed neighbours (never from a captured id, never one the
// caller owns or made): a success, another tenant's data in the answer,
// or a request on another tenant's provider is an authz finding. A route
// with a capture keeps what a caller made naming another tenant's ids for
// the caller's later calls naming that tenant ({own.X_id}). A route with a
// then has its chain called after each probe (crossChains).
func (e *Env) GatewayCrossRoutes() {
	e.T.Helper()
	g := e.llmGateway()
	st := e.routes()
	chk := e.routeChecker()
	ts := e.Box.Set.Tenants
	provisioned := map[string]map[string]string{}
	for _, t := range ts {
		provisioned[t.Name] = g.Access(t).IDs
	}
	chains := crossChains{}
	for _, route := range g.Spec().Routes {
		if _, up := e.routeBase(g, route); !up || !route.NamesForeignIDs() {
			continue // it names no identifier (only the caller's own data), or its backend is not running
		}
		for _, a := range e.Tenants {
			acc := g.Access(a)
			called := map[string]bool{}
			owns := map[string]bool{}
			for k, v := range acc.IDs {
				owns[k+"="+v] = true
			}
			made := st.madeValues(a.Name)
			for _, o := range e.Shuffled(e.Tenants) {
				if o == a {
					continue
				}
				own := e.idsOf(a)
				for k, v := range st.madeBy(a.Name, o.Name) {
					own[k] = v
				}
				for _, ids := range routeIDVariants(o.Name, provisioned, e.idsOf(o), owns, made) {
					values := harness.NewRouteValues(acc, own, ids.ids)
					for _, f := range route.CredentialForms() {
						if !route.ProbesForeignIDs(f) {
							continue // this form names no id: the caller's own call, no probe
						}
						for _, q := range route.Queries() {
							filled, why := llmgw.RouteCall{Route: route, Form: f, Query: q, Caller: acc, Values: values}.Fill()
							if why != "" || called[filled.Key()] {
								continue
							}
							called[filled.Key()] = true
							how := fmt.Sprintf("%s's credentials (%s) with %s's %s", a.Name, formWords(f, q), o.Name, ids.what)
							before := invariants.Counts(ts)
							r := e.sendRoute(g, route, filled, fmt.Sprintf("route %q of %s naming %s's ids", route.Name, a.Name, o.Name))
							after := invariants.Counts(ts)
							ok := route.Succeeded(r.Status, r.Body)
							if ok {
								fd := invariants.Finding{Invariant: invariants.Authz, Tenant: a.Name, Owner: ids.owner, Place: routePlace(route),
									Where:  invariants.Where{Label: routePlace(route), Method: r.Method, Path: r.Path},
									Detail: fmt.Sprintf("%s were not refused: HTTP %d", how, r.Status), Excerpt: excerpt(r.Body)}
								if ids.owner != "" {
									fd.Kind = RouteIDs
								}
								e.Find(fd)
								if len(route.Capture) > 0 {
									e.captureAnswer(st, route, a, a.Name+"\x00"+o.Name, r, ok)
								}
							}
							for _, fd := range dataFindings(chk, route, a.Name, fmt.Sprintf("route %q to %s naming %s's ids", route.Name, a.Name, o.Name), how, r) {
								e.Find(fd)
							}
							e.drove(route, a.Name, how, r, before, after)
							chains.after(e, g, chk, route, a, how)
						}
					}
				}
			}
		}
	}
	chains.controls(e, g)
}

// routeIDSet is one set of ids a caller names: what they are, and whose
// (the tenant that owns the named value, "" when no tenant does).
type routeIDSet struct {
	what, owner string
	ids         map[string]string
}

// routeIDVariants are o's ids (its provisioner's and its captured ones),
// then, for each id its provisioner gave, its guessed neighbours (id-1,
// id+1, id+2) that the caller neither owns (owns: "name=value") nor made
// (made: any captured value of the caller's). A guess is attributed to
// the tenant whose provisioned id of that name it is.
func routeIDVariants(o string, provisioned map[string]map[string]string, all map[string]string, owns, made map[string]bool) []routeIDSet {
	out := []routeIDSet{{what: "ids", owner: o, ids: all}}
	keys := make([]string, 0, len(provisioned[o]))
	for k := range provisioned[o] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := provisioned[o][k]
		for _, n := range invariants.Neighbours(v) {
			if owns[k+"="+n] || made[n] {
				continue
			}
			ids := map[string]string{}
			for k2, v2 := range all {
				ids[k2] = v2
			}
			ids[k] = n
			owner := ""
			for name, m := range provisioned {
				if m[k] == n {
					owner = name
				}
			}
			out = append(out, routeIDSet{what: fmt.Sprintf("guessed %s id %s (a neighbour of its %s)", k, n, v), owner: owner, ids: ids})
		}
	}
	return out
}
