package scenarios

import (
	"context"
	"maps"
	"strings"

	"github.com/tenantcanary/tenantcanary/harness/stores"
	"github.com/tenantcanary/tenantcanary/invariants"
)

// checkStores scans every shared store of the target (Target.Stores),
// owner-aware: a key or row a tenant owns holding another tenant's canary
// is a store finding, a tenant's secret in one nobody owns a shared_place
// one; a store that keeps tenant data must show each tenant's own canary
// (its control). A target with no stores has nothing to scan here.
func checkStores(ctx context.Context, e *Env, r *checkRun) {
	sts := e.Box.Stores()
	if len(sts) == 0 {
		return
	}
	sc := stores.Scan{Matcher: r.chk.Matcher(), Tenants: stores.TenantsOf(r.tenants, e.storeIDs())}
	e.mu.Lock()
	up := e.backendUp
	e.mu.Unlock()
	for _, st := range sts {
		res := st.Scan(ctx, sc)
		r.find(res.Findings...)
		r.counts.StoreKeys += res.Keys
		r.counts.StoreRows += res.Rows
		for _, c := range res.Controls {
			if !up && !c.Passed {
				// No backend of the target has run in this scenario yet (a
				// phase that skipped before starting it): the target can
				// have put nothing of the tenant in the store, so a canary
				// not seen there says nothing of the scan.
				continue
			}
			ctl := Control{Tenant: c.Tenant, Name: c.Name(), Passed: c.Passed, Detail: c.Detail}
			r.controls = append(r.controls, ctl)
			if !c.Passed {
				r.find(invariants.Finding{Invariant: invariants.Control, Tenant: c.Tenant, Where: invariants.Where{Path: st.Name()}, Detail: ctl.Name + ": " + c.Detail})
			}
		}
	}
}

// storeIDs are the ids each tenant's provisioning captured (a gateway
// target's), which store owner rules may name ({<name>_id}); nil for an
// agent target.
func (e *Env) storeIDs() map[string]map[string]string {
	g := e.gatewayRunOf()
	if g == nil {
		return nil
	}
	out := map[string]map[string]string{}
	for _, t := range e.Box.Set.Tenants {
		a := g.g.Access(t)
		ids := maps.Clone(a.IDs)
		if ids == nil {
			ids = map[string]string{}
		}
		if a.Key != "" {
			ids["key"], ids["bare_key"] = a.Key, strings.TrimPrefix(a.Key, "sk-")
		}
		out[t.Name] = ids
	}
	return out
}
