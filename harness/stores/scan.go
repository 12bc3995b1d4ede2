package stores

import (
	"context"
	"fmt"
	"sort"

	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/invariants/scan"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Scan is what a store scan looks for and whose it is.
type Scan struct {
	// Matcher finds every canary of every tenant (invariants.Checker's
	// Matcher, or scan.Compile of invariants.Patterns).
	Matcher *scan.Matcher
	// Tenants are the run's tenants (TenantsOf).
	Tenants []Tenant
}

// Control is a store scan's positive control for one tenant: its own
// canary was seen in the store (Passed), or was not, or the control could
// not run (Ran false, Detail says why).
type Control struct {
	Tenant string
	Store  string
	Ran    bool
	Passed bool
	Detail string
}

// Name is the control's name in a report.
func (c Control) Name() string { return "own canary in the " + c.Store + " store" }

// Result is what one store's scan found and how much it read.
type Result struct {
	Findings []invariants.Finding
	Controls []Control
	// Keys (Redis) or Rows (PostgreSQL) read, Values scanned (a key's
	// name, each field, member and element; each cell) and their Bytes.
	Keys, Rows, Values, Bytes int64
}

// Scan reads every key or row of the store and returns its findings (see
// the package doc) and, for a store that keeps tenant data, a control per
// tenant. A store that could not be read (wholly or in part) is a Harness
// finding naming what was not read, and its controls did not run.
func (s *Store) Scan(ctx context.Context, sc Scan) Result {
	r := &run{sc: sc, store: s, seen: map[string]bool{}, tenants: map[string]Tenant{}}
	for _, t := range sc.Tenants {
		r.tenants[t.Name] = t
	}
	var err error
	if sc.Matcher == nil {
		err = fmt.Errorf("no matcher to scan with")
	} else {
		switch s.Spec.Kind {
		case Redis:
			err = r.redis(ctx)
		case Postgres:
			err = r.postgres(ctx)
		default:
			err = fmt.Errorf("unknown store kind %q", s.Spec.Kind)
		}
	}
	if err != nil {
		r.res.Findings = append(r.res.Findings, invariants.Finding{Invariant: invariants.Harness, Where: invariants.Where{Path: s.Name()},
			Detail: fmt.Sprintf("%s store not scanned: %v", s.Spec.Kind, err)})
	}
	if s.Spec.TenantData {
		for _, t := range sc.Tenants {
			c := Control{Tenant: t.Name, Store: string(s.Spec.Kind), Ran: err == nil, Passed: err == nil && r.seen[t.Name]}
			switch {
			case err != nil:
				c.Detail = "could not run: the store was not scanned: " + err.Error()
			case !c.Passed:
				c.Detail = fmt.Sprintf("none of %s's canaries is in %s, which the target declares keeps per-tenant data (stores: tenant_data)", t.Name, s.Name())
			}
			r.res.Controls = append(r.res.Controls, c)
		}
	}
	r.res.Findings = invariants.Dedup(r.res.Findings)
	return r.res
}

// run is one scan in progress.
type run struct {
	sc      Scan
	store   *Store
	tenants map[string]Tenant
	seen    map[string]bool // tenants whose canary the scan saw
	res     Result
}

// value scans one value (a key's name, a field, a cell) that owner owns
// ("" nobody). loc says, when a finding needs it, where the value sits and
// the place that folds the findings of many fields or rows into one
// (invariants.Finding.Place).
func (r *run) value(ctx context.Context, data []byte, owner string, loc func() (invariants.Where, string), what string) {
	r.res.Values++
	r.res.Bytes += int64(len(data))
	r.sc.Matcher.FindChecked(ctx, data, func(x scan.Match) {
		r.seen[x.Pattern.Owner] = true
		var f invariants.Finding
		switch {
		case owner != "":
			if x.Pattern.Owner == owner || r.tenants[owner].Shared[x.Pattern.Value] {
				return
			}
			f.Invariant, f.Tenant = invariants.TenantStore, owner
			f.Detail = fmt.Sprintf("%s %s owns holds %s's canary", what, owner, x.Pattern.Owner)
		case tenants.Kind(x.Pattern.Kind).Secret():
			f.Invariant = invariants.SharedPlace
			f.Detail = fmt.Sprintf("%s no tenant owns holds %s's secret", what, x.Pattern.Owner)
		default:
			return
		}
		f.Where, f.Place = loc()
		f.Owner, f.Kind, f.Encoding, f.Excerpt = x.Pattern.Owner, tenants.Kind(x.Pattern.Kind), x.Encoding, x.Excerpt
		if x.Container != "" {
			f.Where.Part += " -> " + x.Container
		}
		r.res.Findings = append(r.res.Findings, f)
	}, func(at string, err error) {
		where, _ := loc()
		r.res.Findings = append(r.res.Findings, invariants.Finding{Invariant: invariants.Harness, Tenant: owner, Where: where,
			Detail: fmt.Sprintf("not scanned: %s: %v", at, err)})
	})
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
