package llmgw

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// credentialValue is the secret part of a credential header's value
// (without a Bearer prefix, or a cookie's name).
func credentialValue(v string) string {
	v = strings.TrimSpace(strings.TrimPrefix(v, "Bearer "))
	if name, val, ok := strings.Cut(v, "="); ok && !strings.ContainsAny(name, " ;") && val != "" {
		v = strings.TrimSuffix(val, ";")
	}
	return v
}

// FormHeaders are the headers caller sends in form f, its templates filled
// from v. why, when not empty, says why caller cannot call in that form
// (the provisioner printed no such credential, a template names a value v
// lacks): the call is not made.
func FormHeaders(r harness.Route, f harness.AuthForm, caller harness.GatewayAccess, v harness.RouteValues) (headers map[string]string, why string) {
	switch {
	case f.Name == harness.FormNone:
		return map[string]string{}, ""
	case f.Template():
		h := map[string]string{}
		if f.Bearer != "" {
			b, miss := v.Fill(f.Bearer)
			if miss != "" {
				return nil, fmt.Sprintf("auth form %q: no value for {%s}", f.Name, miss)
			}
			h["Authorization"] = "Bearer " + b
		}
		for k, tpl := range f.Headers {
			x, miss := v.Fill(tpl)
			if miss != "" {
				return nil, fmt.Sprintf("auth form %q: header %s: no value for {%s}", f.Name, k, miss)
			}
			h[k] = x
		}
		return h, ""
	case f.Name == "" || f.Name == harness.FormKey || f.Name == harness.FormHeaders:
		one := r
		one.Auth = f.Name
		if f.Name == harness.FormHeaders && len(caller.Headers) == 0 {
			return nil, "auth form headers: the provisioner gave no headers"
		}
		return Credentials(one, caller), ""
	}
	hs, ok := caller.Credentials[f.Name]
	if !ok || len(hs) == 0 {
		return nil, fmt.Sprintf("auth form %q: the provisioner printed no credential %q (credentials.%s)", f.Name, f.Name, f.Name)
	}
	out := make(map[string]string, len(hs))
	for k, x := range hs {
		out[k] = x
	}
	return out, ""
}

// RouteCall is one call of a route: in which form, with which query
// variant, from whom, filled from which values.
type RouteCall struct {
	Route  harness.Route
	Form   harness.AuthForm
	Query  string // a query variant ("" for the route as declared)
	Caller harness.GatewayAccess
	Values harness.RouteValues
}

// Filled is a RouteCall made concrete: its path, body and headers.
type Filled struct {
	Method, Path, Body string
	Headers            map[string]string
}

// Key tells two calls apart: the same key is the same request.
func (f Filled) Key() string {
	var b strings.Builder
	b.WriteString(f.Method + " " + f.Path + "\x00" + f.Body)
	for _, k := range slices.Sorted(maps.Keys(f.Headers)) {
		b.WriteString("\x00" + k + ":" + f.Headers[k])
	}
	return b.String()
}

// Fill makes c concrete; why, when not empty, says why it cannot be made.
func (c RouteCall) Fill() (Filled, string) {
	path, miss := c.Values.Fill(harness.WithQuery(c.Route.Path, c.Query))
	if miss != "" {
		return Filled{}, "no value for {" + miss + "}"
	}
	body, miss := c.Values.Fill(c.Route.Body)
	if miss != "" {
		return Filled{}, "no value for {" + miss + "}"
	}
	h, why := FormHeaders(c.Route, c.Form, c.Caller, c.Values)
	if why != "" {
		return Filled{}, why
	}
	return Filled{Method: c.Route.Method, Path: path, Body: body, Headers: h}, ""
}

// Send makes the filled call on the gateway.
func (g *Gateway) Send(ctx context.Context, f Filled) (Reply, error) {
	return g.SendAt(ctx, g.Base(), f)
}

// SendAt makes the filled call on base (http://host:port): a route of
// another backend of the target (Route.Backend).
func (g *Gateway) SendAt(ctx context.Context, base string, f Filled) (Reply, error) {
	var b []byte
	if f.Body != "" {
		b = []byte(f.Body)
	}
	return g.doAt(ctx, strings.TrimRight(base, "/"), f.Method, f.Path, f.Headers, b)
}

// AgentIDs are the ids the harness has for a tenant of an agent server
// (a target whose gateway is reached by access templates): its profile's
// name ({profile_id}) and its own name ({tenant_id}), for the target's
// routes.
func AgentIDs(t *tenants.Tenant) map[string]string {
	return map[string]string{"profile": t.Profile(), "tenant": t.Name}
}

// OwnCall fills route as a caller's own call: the first of its credential
// forms (none, when it lists only none) that values can fill. why, when
// not empty, says why no form could be.
func OwnCall(route harness.Route, caller harness.GatewayAccess, values harness.RouteValues) (Filled, harness.AuthForm, string) {
	forms := route.CredentialForms()
	if len(forms) == 0 {
		forms = []harness.AuthForm{{Name: harness.FormNone}}
	}
	var whys []string
	for _, f := range forms {
		filled, why := RouteCall{Route: route, Form: f, Caller: caller, Values: values}.Fill()
		if why == "" {
			return filled, f, ""
		}
		whys = append(whys, why)
	}
	return Filled{}, harness.AuthForm{}, strings.Join(whys, "; ")
}
