package llmgw

import (
	"fmt"
	"strings"

	"github.com/tenantcanary/tenantcanary/harness"
)

// FormProbe is one call of a route in one of a tenant's credential forms,
// with the tenant's own ids: what gateway-offboarding presents before and
// after each deprovision step.
type FormProbe struct {
	// Form names the credential ("gateway key", "credential session",
	// `auth form "key with a channel suffix"`).
	Form string
	// Call is the call made.
	Call Filled
	// Control is true when the call must succeed while the tenant is
	// active: a read route in one of its declared forms that its owner
	// must be served in (AuthForm.MustWork), the default form included.
	Control bool
}

// RouteProbes are every credential form of tenant a on route r, filled
// with ids (a's own: {X_id} and {own.X_id} alike): the route's declared
// forms (its `auth` list, templates such as {key}-{channel_id} included,
// or its default form), then every form of CredentialsOf(a) the route
// does not already send, so that a credential the route does not list is
// presented there too. Forms that send the same request are given once,
// under the first name. skipped says why a declared form cannot be sent
// (the provisioner printed no such credential, a template names a value
// a lacks); a route whose path or body names an id ids lack gives no
// probes and no reasons.
func RouteProbes(r harness.Route, a harness.GatewayAccess, ids map[string]string) (probes []FormProbe, skipped []string) {
	v := harness.NewRouteValues(a, ids, ids)
	path, miss := v.Fill(r.Path)
	body, miss2 := v.Fill(r.Body)
	if miss != "" || miss2 != "" {
		return nil, nil
	}
	seen := map[string]int{} // Filled.Key -> index in probes
	add := func(p FormProbe) {
		k := p.Call.Key()
		if i, ok := seen[k]; ok {
			probes[i].Control = probes[i].Control || p.Control
			return
		}
		seen[k] = len(probes)
		probes = append(probes, p)
	}
	generic := CredentialsOf(a)
	for _, f := range r.CredentialForms() {
		call := RouteCall{Route: r, Form: f, Caller: a, Values: v}
		filled, why := call.Fill()
		if why != "" {
			skipped = append(skipped, fmt.Sprintf("route %q: %s", r.Name, why))
			continue
		}
		name := formName(f, filled.Headers, generic)
		add(FormProbe{Form: name, Call: filled, Control: r.Read && f.MustWork()})
	}
	for _, c := range generic {
		add(FormProbe{Form: c.Name, Call: Filled{Method: r.Method, Path: path, Body: body, Headers: c.Headers}})
	}
	return probes, skipped
}

// formName names a declared form in the offboarding probes: as the
// credential of CredentialsOf that sends the same headers, when one does
// (the key, the management headers, a printed credential), else by its
// own name.
func formName(f harness.AuthForm, headers map[string]string, generic []Credential) string {
	k := headersKey(headers)
	for _, c := range generic {
		if headersKey(c.Headers) == k {
			return c.Name
		}
	}
	name := f.Name
	if name == "" {
		name = "default"
	}
	return fmt.Sprintf("auth form %q", strings.TrimSpace(name))
}
