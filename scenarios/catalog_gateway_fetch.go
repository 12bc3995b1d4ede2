package scenarios

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/llmgw"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// FetchBody is the kind of the canary the harness's fetch listener
// answers, one per tenant and probe.
const FetchBody tenants.Kind = "fetch_body"

func gatewayFetch() Spec {
	return withNeeds(llmGatewaySpec(Spec{
		ID:      "gateway-fetch",
		Purpose: "every route field the target marks as a URL, given by each tenant as a URL of the harness's own loopback listener: the gateway never fetches it, and never hands the listener's answer back; a URL stored on one route and fetched when another (then) is called is fetched only on its owner's behalf (a webhook: fetched then, a control), with none of another tenant's data",
		Focus:   []Invariant{invariants.Fetch, Text},
		Timeout: 5 * time.Minute,
		Phases: []Phase{
			{Name: "fetch-probes", Run: func(e *Env) {
				e.StartLLMGateway()
				e.GatewayOwnKeys()
				e.GatewayFetchProbes()
			}},
		},
	}), NeedURLFields)
}

// GatewayFetchProbes starts the harness's fetch listener and proves it
// reachable (a positive control: the harness's own GET gets the answer),
// then, for each tenant and each url field of each route it has the ids
// for, calls the route with its own credentials and the field set to a
// listener URL of its own (one path per tenant and probe, answering a
// canary minted for it). A request on that path, or the answer in the
// reply, is a Fetch finding. Every reply is scanned as a stream to the
// caller.
func (e *Env) GatewayFetchProbes() {
	e.T.Helper()
	g := e.llmGateway()
	l, err := llmgw.NewFetchListener()
	if err != nil {
		e.T.Fatalf("%v", err)
	}
	e.T.Cleanup(func() { _ = l.Close() })
	e.fetchListenerControl(l)
	var probes []invariants.FetchProbe
	var stored []storedURL // beside probes: whose URL, given on which route
	for _, t := range e.Tenants {
		a := g.Access(t)
		for _, r := range g.Spec().Routes {
			for i, field := range r.URLFields {
				path, body, ok := llmgw.FillRoute(r, a.IDs)
				if !ok {
					continue
				}
				c := e.mint(t, FetchBody)
				u := l.URL(t.Name, strconv.Itoa(len(probes)+1), "canary listener answer "+c.Value)
				path, body, err := llmgw.SetURLField(path, body, field, u)
				if err != nil {
					e.T.Fatalf("route %q: %v", r.Name, err)
				}
				var b []byte
				if body != "" {
					b = []byte(body)
				}
				h, why := llmgw.OwnCredentials(r, a, harness.NewRouteValues(a, a.IDs, a.IDs))
				if why != "" {
					e.skipRow(string(invariants.Fetch), fmt.Sprintf("route %q of %s: no credential form of the route can be filled: %s", r.Name, t.Name, why))
					continue
				}
				ctx, cancel := e.ctx(30 * time.Second)
				rep, err := g.Do(ctx, r.Method, path, h, b)
				cancel()
				if err != nil {
					e.T.Fatalf("fetch probe of %s on route %q: %v", t.Name, r.Name, err)
				}
				e.KeepText(t, fmt.Sprintf("route %q (%s %s) to %s with its url field %s pointed at the harness", r.Name, r.Method, path, t.Name, field), rep.Body)
				probes = append(probes, invariants.FetchProbe{Tenant: t.Name, URL: u, Body: c.Value, Reply: rep.Body,
					Where: invariants.Where{Label: fmt.Sprintf("route %q", r.Name), Method: r.Method, Path: r.Path, Part: fmt.Sprintf("url field %s (#%d)", field, i+1)}})
				stored = append(stored, storedURL{t: t, route: r, field: field, url: u})
			}
		}
	}
	if len(probes) == 0 {
		e.T.Skipf("no route with url_fields could be filled with a tenant's ids")
	}
	// A fetch the gateway makes later (a callback, a notify hook, a route
	// of then) counts too: the hits are read once every probe and trigger
	// was made. A webhook's own fetch is expected: its triggers judge it.
	e.GatewayFetchTriggers(g, l, stored)
	for i, p := range probes {
		if stored[i].route.Webhook {
			continue
		}
		p.Hits = len(l.HitsOn(p.URL))
		for _, f := range invariants.FetchLeaks(p) {
			e.Find(f)
		}
	}
	e.fetchRequestFindings(l, stored)
}

// fetchListenerControl: the harness's own GET of a control URL on the
// listener is answered with its body and recorded as a hit, so a probe
// with no hit means the gateway made no request, not that the listener
// was unreachable.
func (e *Env) fetchListenerControl(l *llmgw.FetchListener) {
	e.T.Helper()
	want := "canary listener control " + newToken()
	u := l.URL("harness", "control", want)
	ctx, cancel := e.ctx(30 * time.Second)
	defer cancel()
	ok, detail := false, ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err == nil {
		var resp *http.Response
		resp, err = http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			ok = resp.StatusCode == http.StatusOK && strings.Contains(string(body), want) && len(l.HitsOn(u)) == 1
			detail = fmt.Sprintf("GET %s: HTTP %d, %d hit(s) recorded: %s", u, resp.StatusCode, len(l.HitsOn(u)), excerpt(body))
		}
	}
	if err != nil {
		detail = fmt.Sprintf("GET %s: %v", u, err)
	}
	for _, t := range e.Tenants {
		e.gatewayControl(t, "the fetch listener answers on loopback", ok, detail)
	}
}
