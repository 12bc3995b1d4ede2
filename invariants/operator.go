package invariants

import (
	"context"
	"fmt"

	"github.com/tenantcanary/tenantcanary/invariants/scan"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Operator scans tenant-visible places for the operator's secrets (the
// serve token, managed scope values, secrets a target file declares),
// each a canary owned by OperatorOwner.
type Operator struct {
	m *scan.Matcher
}

// WithFileCache is Checker.WithFileCache for the operator's secrets.
func (o *Operator) WithFileCache(fc *scan.FileCache) *Operator {
	if o.m != nil {
		o.m = o.m.WithCache(fc)
	}
	return o
}

// NewOperator compiles the operator's secrets: kind names each (e.g.
// "serve_token"). Empty values are dropped; none at all gives an Operator
// that finds nothing.
func NewOperator(secrets map[string]string) (*Operator, error) {
	var ps []scan.Pattern
	for kind, v := range secrets {
		if v != "" {
			ps = append(ps, scan.Pattern{Owner: OperatorOwner, Kind: kind, Value: v})
		}
	}
	if len(ps) == 0 {
		return &Operator{}, nil
	}
	m, err := scan.Compile(ps)
	if err != nil {
		return nil, fmt.Errorf("compile the operator's secrets: %w", err)
	}
	return &Operator{m: m}, nil
}

// Text reports each operator secret in data, a place tenant sees (label
// names it, e.g. "request #3 on alpha's provider").
func (o *Operator) Text(tenant, label string, data []byte) []Finding {
	if o.m == nil {
		return nil
	}
	var out []Finding
	o.m.Find(data, func(x scan.Match) {
		out = append(out, hitFinding(OperatorSecret, tenant, x, Where{Label: label, Offset: int64p(x.Start)}))
	})
	return out
}

// Requests reports operator secrets in every request on each tenant's
// provider (tool results, and so environment snapshots, included).
func (o *Operator) Requests(ts []*tenants.Tenant) []Finding {
	if o.m == nil {
		return nil
	}
	var out []Finding
	for _, t := range ts {
		if !t.HasProvider() {
			continue
		}
		for _, r := range t.Requests() {
			label := fmt.Sprintf("request #%d on %s's provider", r.Seq, t.Name)
			out = append(out, o.Text(t.Name, label, r.RawBody)...)
			out = append(out, o.Text(t.Name, label+" auth", []byte(r.Auth))...)
		}
	}
	return out
}

// Homes reports operator secrets in the files under every tenant's home
// and state folder.
func (o *Operator) Homes(ctx context.Context, s *tenants.Set) []Finding {
	if o.m == nil {
		return nil
	}
	var out []Finding
	for _, root := range TenantRoots(s) {
		r := o.m.Tree(ctx, root)
		for _, h := range r.Hits {
			place, _ := placeOf(s, h.Path)
			out = append(out, hitFinding(OperatorSecret, place, h.Match, fileWhere(h)))
		}
	}
	return out
}
