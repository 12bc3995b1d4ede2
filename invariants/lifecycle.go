package invariants

import (
	"context"
)

// Inherited scans the home of a profile created mid-run (place names it)
// before anything is written into it: nothing of any tenant may be there,
// not even of a deleted profile of the same name, so every canary found
// (the place's own name included) is a File finding.
func (c *Checker) Inherited(ctx context.Context, place, home string) []Finding {
	r := c.m.m.Tree(ctx, home)
	var out []Finding
	for _, h := range r.Hits {
		f := hitFinding(File, place, h.Match, fileWhere(h))
		f.Detail = "a freshly created profile inherits it"
		out = append(out, f)
	}
	for _, sk := range r.Skipped {
		out = append(out, Finding{Invariant: Harness, Tenant: place, Where: Where{Path: sk.Path}, Detail: "not scanned: " + sk.Reason})
	}
	return Dedup(out)
}
