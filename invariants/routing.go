package invariants

import (
	"fmt"

	"github.com/tenantcanary/tenantcanary/tenants"
)

// Counts is how many requests each tenant's provider has recorded, by
// tenant name.
func Counts(ts []*tenants.Tenant) map[string]int {
	out := make(map[string]int, len(ts))
	for _, t := range ts {
		if t.HasProvider() {
			out[t.Name] = len(t.Requests())
		}
	}
	return out
}

// RoutedElsewhere reports, as Routing findings, every provider but the
// caller's that recorded requests between before and after (Counts taken
// around what caller did, described by what: "alpha's failover after a
// 500").
func RoutedElsewhere(ts []*tenants.Tenant, caller, what string, before, after map[string]int) []Finding {
	var out []Finding
	for _, t := range ts {
		if t.Name == caller {
			continue
		}
		if n := after[t.Name] - before[t.Name]; n > 0 {
			out = append(out, Finding{Invariant: Routing, Tenant: t.Name,
				Where:  Where{Label: "provider of " + t.Name},
				Detail: fmt.Sprintf("%d request(s) reached its provider during %s", n, what)})
		}
	}
	return out
}
