package scenarios

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/llmgw"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// gateway-offboarding: one tenant is disabled, then deleted, through the
// target's deprovision command; after each step every credential it held
// is refused on every route, relay and management, and drives nothing
// upstream; a new tenant provisioned under the same name holds nothing of
// the old one.

// offboardState is what gateway-offboarding keeps between its phases.
type offboardState struct {
	victim    *tenants.Tenant
	access    harness.GatewayAccess // the victim's access as provisioned
	successor *tenants.Tenant
}

// offboardKey is gateway-offboarding's victim and successor.
var offboardKey = &stateKey[offboardState]{"gateway-offboarding"}

func gatewayOffboarding() Spec {
	return withNeeds(llmGatewaySpec(Spec{
		ID:      "gateway-offboarding",
		Purpose: "a tenant disabled, then deleted, through the target's deprovision command: every credential it held is refused on every route and drives nothing upstream; a tenant provisioned again under its name holds nothing of it",
		Focus:   []Invariant{Authz, Routing, Text, SharedStore},
		Timeout: 6 * time.Minute,
		Phases: []Phase{
			{Name: "before", Run: func(e *Env) {
				g := e.StartLLMGateway()
				e.GatewayOwnKeys()
				e.GatewayReads()
				v := e.Shuffled(e.Tenants)[0]
				*stateOf(e, offboardKey) = offboardState{victim: v, access: g.Access(v)}
				e.Logf("gateway-offboarding: the victim is %s", v.Name)
				e.offboardProbe(v, g.Access(v), "")
			}},
			{Name: "disable", Run: func(e *Env) { e.offboardStep(stateOf(e, offboardKey), harness.StepDisable) }},
			{Name: "delete", Run: func(e *Env) { e.offboardStep(stateOf(e, offboardKey), harness.StepDelete) }},
			{Name: "same-name-again", Run: func(e *Env) { e.offboardSuccessor(stateOf(e, offboardKey)) }},
		},
	}), NeedDeprovision)
}

// offboardStep runs one deprovision step on the victim, then probes its
// credentials and checks that its neighbours are still served.
func (e *Env) offboardStep(st *offboardState, step string) {
	e.T.Helper()
	g := e.llmGateway()
	ctx, cancel := e.ctx(2 * time.Minute)
	err := g.Deprovision(ctx, st.victim, step)
	cancel()
	if err != nil {
		e.T.Fatalf("%v", err)
	}
	e.offboardProbe(st.victim, st.access, step)
	e.neighboursServed(st.victim, "after "+st.victim.Name+"'s "+step)
}

// offboardProbe presents every credential form of the victim's access on
// every route: on the relay (chat with its own model) and the model list,
// each form of llmgw.CredentialsOf (its gateway key, its management
// headers, each header alone, each credential the provisioner printed);
// on every declared route not public, with its own ids, those and each of the route's
// own forms (llmgw.RouteProbes: its auth list, templates such as
// {key}-{channel_id} included). step "" is before offboarding: then only
// reads are made, and the key on the relay and the model list, and each
// declared form of a read route, must be accepted (the positive control
// that the refusals after a step mean something). After a step, any
// acceptance is an Authz finding, and so is any request on any provider.
func (e *Env) offboardProbe(v *tenants.Tenant, a harness.GatewayAccess, step string) {
	e.T.Helper()
	g := e.llmGateway()
	spec := g.Spec()
	ts := e.Box.Set.Tenants
	before := invariants.Counts(ts)
	when := "before offboarding"
	if step != "" {
		when = "after " + step
	}
	type probe struct {
		what, form string
		call       llmgw.Filled
		ok         func(status int, body []byte) bool
		control    bool // must be accepted before offboarding
		write      bool // changes something: only after a step
	}
	var probes []probe
	chat := fmt.Sprintf(`{"model": %q, "messages": [{"role": "user", "content": "offboarding probe of %s"}]}`, a.Models[0], v.Name)
	for _, cred := range llmgw.CredentialsOf(a) {
		keyForm := cred.Name == "gateway key"
		probes = append(probes, probe{what: "the relay", form: cred.Name, control: keyForm,
			call: llmgw.Filled{Method: http.MethodPost, Path: a.BasePath + g.ChatPath(), Body: chat, Headers: cred.Headers},
			ok:   func(s int, _ []byte) bool { return s/100 == 2 }})
		if spec.ModelsPath != "" {
			probes = append(probes, probe{what: "the model list", form: cred.Name, control: keyForm,
				call: llmgw.Filled{Method: http.MethodGet, Path: a.BasePath + spec.ModelsPath, Headers: cred.Headers},
				ok:   func(s int, b []byte) bool { return s/100 == 2 && strings.Contains(string(b), a.Models[0]) }})
		}
	}
	ids := e.routes().capturedOf(v.Name)
	for k, x := range a.IDs {
		ids[k] = x
	}
	for _, r := range spec.Routes {
		if r.OnServe() || r.Public {
			continue // anyone may call a public route: its acceptance means nothing
		}
		rps, skipped := llmgw.RouteProbes(r, a, ids)
		if step == "" && r.Read {
			for _, why := range skipped {
				e.gatewayControl(v, fmt.Sprintf("every declared form of route %q can be sent before offboarding", r.Name), false, why)
			}
		}
		for _, rp := range rps {
			probes = append(probes, probe{what: fmt.Sprintf("route %q", r.Name), form: rp.Form, call: rp.Call,
				ok: r.Succeeded, control: rp.Control, write: !r.Read})
		}
	}
	for _, p := range probes {
		if p.write && step == "" {
			continue
		}
		ctx, cancel := e.ctx(30 * time.Second)
		rep, err := g.Send(ctx, p.call)
		cancel()
		if err != nil {
			e.T.Fatalf("offboarding probe of %s's %s on %s: %v", v.Name, p.form, p.what, err)
		}
		c := p.call
		label := fmt.Sprintf("%s's %s on %s (%s %s) %s", v.Name, p.form, p.what, c.Method, c.Path, when)
		e.KeepText(v, label, rep.Body)
		accepted := p.ok(rep.Status, rep.Body)
		if step == "" {
			if p.control {
				e.gatewayControl(v, fmt.Sprintf("%s accepted on %s before offboarding", p.form, p.what), accepted,
					fmt.Sprintf("%s %s: HTTP %d: %s", c.Method, c.Path, rep.Status, excerpt(rep.Body)))
			}
			continue
		}
		if accepted {
			e.Find(invariants.Finding{Invariant: invariants.Authz, Tenant: v.Name,
				Where:  invariants.Where{Label: p.what, Method: c.Method, Path: c.Path, Part: p.form},
				Detail: fmt.Sprintf("after its %s, %s's credential (%s) was accepted on %s: HTTP %d", step, v.Name, p.form, p.what, rep.Status), Excerpt: excerpt(rep.Body)})
		}
	}
	if step == "" {
		return
	}
	after := invariants.Counts(ts)
	for _, t := range ts {
		if n := after[t.Name] - before[t.Name]; n > 0 {
			e.Find(invariants.Finding{Invariant: invariants.Authz, Tenant: t.Name, Owner: v.Name, Where: invariants.Where{Label: "provider of " + t.Name},
				Detail: fmt.Sprintf("%s's credentials after its %s drove %d request(s) to this provider", v.Name, step, n)})
		}
	}
}

// neighboursServed: every tenant but v (and tenants already offboarded)
// chats with its own key: answered by its own provider, and by no other.
func (e *Env) neighboursServed(v *tenants.Tenant, when string) {
	e.T.Helper()
	g := e.llmGateway()
	ts := e.Box.Set.Tenants
	for _, t := range e.Tenants {
		if t == v || g.Offboarded(t) != "" {
			continue
		}
		before := invariants.Counts(ts)
		r := e.chat(t, fmt.Sprintf("gateway reply to %s %s", t.Name, when), e.ownChat(t, false), 90*time.Second)
		after := invariants.Counts(ts)
		for _, f := range invariants.RoutedElsewhere(ts, t.Name, t.Name+"'s own chat "+when, before, after) {
			e.Find(f)
		}
		e.gatewayControl(t, "own key still served "+strings.SplitN(when, " ", 2)[0]+" a neighbour's offboarding",
			r.Status == http.StatusOK && after[t.Name] > before[t.Name] && strings.Contains(r.Text, t.Model()),
			fmt.Sprintf("%s: HTTP %d, %d new request(s) on its provider: %s", when, r.Status, after[t.Name]-before[t.Name], excerpt(r.Body)))
	}
}

// offboardSuccessor provisions a new tenant under the deleted victim's
// name (its own provider, upstream key and model): its own chat is served
// by its own provider, its reads hold nothing of the victim's (the text
// scan, and an Authz finding here), and the victim's credentials are
// still refused and drive nothing.
func (e *Env) offboardSuccessor(st *offboardState) {
	e.T.Helper()
	g := e.llmGateway()
	v := st.victim
	s, err := e.Box.Set.AddTenant(successorName(v.Name))
	if err != nil {
		e.T.Fatalf("a successor of %s: %v", v.Name, err)
	}
	e.Tenants = append(e.Tenants, s)
	st.successor = s
	ctx, cancel := e.ctx(2 * time.Minute)
	err = g.ProvisionAs(ctx, s, v.Name)
	cancel()
	if err != nil {
		e.T.Fatalf("provision a new tenant under the deleted %s's name: %v", v.Name, err)
	}
	e.noteProvisionerSecrets(g)
	ts := e.Box.Set.Tenants
	chk := e.checker(ts)
	old := func(label string, body []byte, where invariants.Where) {
		for _, f := range chk.TextLeaks(label, body, s.Name) {
			if f.Owner != v.Name {
				continue // the text scan reports it
			}
			e.Find(invariants.Finding{Invariant: invariants.Authz, Tenant: s.Name, Owner: v.Name, Kind: f.Kind, Where: where,
				Detail:  fmt.Sprintf("a tenant provisioned again under the deleted %s's name holds the old one's data", v.Name),
				Excerpt: f.Excerpt})
			return
		}
	}
	before := invariants.Counts(ts)
	r := e.chat(s, "gateway reply to "+s.Name+" (provisioned as "+v.Name+")", e.ownChat(s, false), 90*time.Second)
	after := invariants.Counts(ts)
	for _, f := range invariants.RoutedElsewhere(ts, s.Name, s.Name+"'s own chat (provisioned again as "+v.Name+")", before, after) {
		e.Find(f)
	}
	e.gatewayControl(s, "own key answered by own provider", r.Status == http.StatusOK && after[s.Name] > before[s.Name] && strings.Contains(r.Text, s.Model()),
		fmt.Sprintf("HTTP %d, %d new request(s) on its provider: %s", r.Status, after[s.Name]-before[s.Name], excerpt(r.Body)))
	old("chat of "+s.Name, r.Body, invariants.Where{Label: "relay of " + s.Name})
	a := g.Access(s)
	spec := g.Spec()
	ctx, cancel = e.ctx(e.Times.Call)
	defer cancel()
	if spec.ModelsPath != "" {
		rep, err := g.Do(ctx, http.MethodGet, a.BasePath+spec.ModelsPath, map[string]string{"Authorization": "Bearer " + a.Key}, nil)
		if err != nil {
			e.T.Fatalf("model list of %s: %v", s.Name, err)
		}
		e.KeepText(s, "model list of "+s.Name, rep.Body)
		old("model list of "+s.Name, rep.Body, invariants.Where{Label: "model list", Path: rep.Path})
	}
	for _, route := range spec.Routes {
		if !route.Read {
			continue
		}
		rep, ok, err := g.CallRoute(ctx, route, a, a.IDs)
		if err != nil {
			e.T.Fatalf("route %q of %s: %v", route.Name, s.Name, err)
		}
		if !ok {
			continue
		}
		label := fmt.Sprintf("route %q (%s %s) to %s", route.Name, rep.Method, rep.Path, s.Name)
		e.KeepText(s, label, rep.Body)
		old(label, rep.Body, invariants.Where{Label: fmt.Sprintf("route %q", route.Name), Method: rep.Method, Path: rep.Path})
		e.gatewayControl(s, fmt.Sprintf("own route %q answers", route.Name), route.Succeeded(rep.Status, rep.Body),
			fmt.Sprintf("%s %s: HTTP %d: %s", rep.Method, rep.Path, rep.Status, excerpt(rep.Body)))
	}
	e.offboardProbe(v, st.access, harness.StepDelete+" and a new tenant under its name")
}

// successorName names the tenant provisioned again under name.
func successorName(name string) string {
	const suffix = "-again"
	if len(name)+len(suffix) > 32 {
		name = strings.TrimRight(name[:32-len(suffix)], "-")
	}
	return name + suffix
}

// offboardedFirst orders ts with the offboarded tenants first.
func offboardedFirst(g *llmgw.Gateway, ts []*tenants.Tenant) []*tenants.Tenant {
	out := make([]*tenants.Tenant, 0, len(ts))
	for _, t := range ts {
		if g.Offboarded(t) != "" {
			out = append(out, t)
		}
	}
	for _, t := range ts {
		if g.Offboarded(t) == "" {
			out = append(out, t)
		}
	}
	return out
}
