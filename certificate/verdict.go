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
	if c.Verdict != Certified {
		return c.Verdict.Headline()
	}
	accepted := ""
	switch n := c.AcceptedCount(); {
	case n == 1:
		accepted = " with 1 accepted finding"
	case n > 1:
		accepted = fmt.Sprintf(" with %d accepted findings", n)
	}
	tail := ": no tenant's data reached another tenant"
	if accepted != "" {
		tail = ": no tenant's data reached another tenant but what the target's known findings accept"
	}
	if partial := c.Partial(); partial != "" {
		return "certified" + accepted + ", partial: " + partial + tail + " in what ran"
	}
	if accepted != "" {
		return "certified" + accepted + tail
	}
	return c.Verdict.Headline()
}
