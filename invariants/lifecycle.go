package invariants

import (
	"context"

	"github.com/tenantcanary/tenantcanary/invariants/scan"
)

// Inherited scans the home of a profile created mid-run (place names it)
// before anything is written into it: nothing of any tenant may be there,
// not even of a deleted profile of the same name, so every canary found
// (the place's own name included) is a File finding.
func (c *Checker) Inherited(ctx context.Context, place, home string) []Finding {
	return homeFindings(ctx, c.m.m, place, home, "a freshly created profile inherits it")
}

// homeFindings scans the tree at home with m: every hit is a File finding
// of place with detail, every file it could not scan a Harness one.
func homeFindings(ctx context.Context, m *scan.Matcher, place, home, detail string) []Finding {
	r := m.Tree(ctx, home)
	var out []Finding
	for _, h := range r.Hits {
		f := hitFinding(File, place, h.Match, fileWhere(h))
		f.Detail = detail
		out = append(out, f)
	}
	for _, sk := range r.Skipped {
		out = append(out, Finding{Invariant: Harness, Tenant: place, Where: Where{Path: sk.Path}, Detail: "not scanned: " + sk.Reason})
	}
	return Dedup(out)
}
