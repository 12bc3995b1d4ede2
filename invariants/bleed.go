package invariants

import (
	"fmt"

	"github.com/tenantcanary/tenantcanary/tenants"
)

// LaunchBleedOf checks the model a session of profile reports (where says
// where it was reported, e.g. "session.create info.model"): a secondary
// profile's session that reports the launch profile's model has bled; any
// other model than the profile's own is reported too.
func LaunchBleedOf(ts []*tenants.Tenant, profile, model, where string) []Finding {
	var p, launch *tenants.Tenant
	for _, t := range ts {
		if t.Name == profile {
			p = t
		}
		if t.Launch {
			launch = t
		}
	}
	if p == nil {
		return harnessFinding(profile, fmt.Errorf("launch bleed: %q is not a tenant of this run", profile))
	}
	if p.Declares(model) {
		return nil
	}
	f := Finding{Invariant: LaunchBleed, Tenant: profile, Where: Where{Label: where},
		Detail: fmt.Sprintf("the session reports model %q, want %q", model, p.Model())}
	if launch != nil && model == launch.Model() {
		f.Owner, f.Kind = launch.Name, tenants.Model
		f.Detail = fmt.Sprintf("the session reports the launch profile's model %q, want %q", model, p.Model())
	} else if owner := ownerOf(ts, tenants.Model, model); owner != "" {
		f.Owner, f.Kind = owner, tenants.Model
	}
	return []Finding{f}
}
