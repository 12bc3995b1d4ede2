package scenarios

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/llmgw"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// gatewayChecks are the gateway family's checks after every phase: the
// positive controls its phases recorded, each tenant's own key on its own
// provider, and the shared-store invariant with its control.
func (e *Env) gatewayChecks(ctx context.Context, chk *invariants.Checker) ([]invariants.Finding, []Control) {
	r := e.gatewayRunOf()
	if r == nil {
		return nil, nil
	}
	var out []invariants.Finding
	var controls []Control
	add := func(c Control) {
		controls = append(controls, c)
		if !c.Passed {
			out = append(out, invariants.Finding{Invariant: invariants.Control, Tenant: c.Tenant, Detail: c.Name + ": " + c.Detail})
		}
	}
	r.mu.Lock()
	recorded := make([]Control, 0, len(r.controls))
	for _, c := range r.controls {
		recorded = append(recorded, c)
	}
	r.mu.Unlock()
	for _, c := range recorded {
		add(c)
	}
	for _, t := range e.Box.Set.Tenants {
		if t.HasProvider() {
			f := invariants.ControlKeys([]*tenants.Tenant{t})
			c := Control{Tenant: t.Name, Name: "own upstream key on own provider", Passed: len(f) == 0}
			if len(f) > 0 {
				c.Detail = f[0].Detail
			}
			add(c)
		}
	}
	if st := r.g.Spec().Store; st != nil {
		fs, cs := e.storeCheck(ctx, chk, r.g)
		out = append(out, fs...)
		for _, c := range cs {
			add(c)
		}
	}
	sort.SliceStable(controls, func(i, j int) bool {
		if controls[i].Tenant != controls[j].Tenant {
			return controls[i].Tenant < controls[j].Tenant
		}
		return controls[i].Name < controls[j].Name
	})
	return out, controls
}

// storeCheck runs the shared-store invariant over the target's declared
// store, each row's owner mapped through the provisioner's ids.
func (e *Env) storeCheck(ctx context.Context, chk *invariants.Checker, g *llmgw.Gateway) ([]invariants.Finding, []Control) {
	st := g.Spec().Store
	root := func(p string) string { return strings.ReplaceAll(p, "{root}", e.Box.Root) }
	s := invariants.Store{DB: root(st.SQLite), DataDir: root(st.DataDir), Scratch: e.Box.Logs}
	owners := map[string]bool{} // tenants with an id some place maps
	for _, p := range st.Places {
		sp := invariants.StorePlace{Table: p.Table, Column: p.Column, OwnerColumn: p.OwnerColumn, Owners: map[string]string{}}
		// Offboarded tenants first: an id the gateway gave again belongs
		// to the tenant that holds it now.
		for _, t := range offboardedFirst(g, e.Box.Set.Tenants) {
			if id := g.Access(t).IDs[p.OwnerID]; id != "" {
				sp.Owners[id] = t.Name
				owners[t.Name] = true
			}
		}
		s.Places = append(s.Places, sp)
	}
	fs, own := chk.StoreLeaks(ctx, s)
	var cs []Control
	for _, t := range e.Box.Set.Tenants {
		if g.Offboarded(t) == harness.StepDelete {
			continue // deleted: nothing of it may rest anywhere
		}
		c := Control{Tenant: t.Name, Name: "own secret at rest in its declared place", Passed: own[t.Name]}
		if !c.Passed {
			c.Detail = fmt.Sprintf("no row of %s it owns holds one of its secrets (owner ids known: %v)", s.DB, owners[t.Name])
		}
		cs = append(cs, c)
	}
	return fs, cs
}
