package certificate

import (
	"fmt"
	"strings"

	"github.com/tenantcanary/tenantcanary/scenarios"
)

// Partial says what of the catalog did not run: "5 of 9 scenarios
// skipped, 2 checks skipped", or "" when everything ran. A skipped
// scenario or check is never a pass, so a certificate with any says so in
// its verdict line.
func (c *Certificate) Partial() string {
	scen, checks := 0, 0
	for i := range c.Scenarios {
		r := &c.Scenarios[i]
		if r.Result == scenarios.Skipped {
			scen++
			continue
		}
		checks += len(r.Skipped)
	}
	var parts []string
	if scen > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d scenarios skipped", scen, len(c.Scenarios)))
	}
	switch {
	case checks == 1:
		parts = append(parts, "1 check skipped")
	case checks > 1:
		parts = append(parts, fmt.Sprintf("%d checks skipped", checks))
	}
	return strings.Join(parts, ", ")
}

// Headline is the verdict line: the verdict in a few words, saying when a
// certified run was partial ("certified, partial: 5 of 9 scenarios skipped: no
// tenant's data reached another tenant in what ran").
func (c *Certificate) Headline() string {
	if c.Verdict == Certified {
		if partial := c.Partial(); partial != "" {
			return "certified, partial: " + partial + ": no tenant's data reached another tenant in what ran"
		}
	}
	return c.Verdict.Headline()
}
