package certificate

import (
	"fmt"
	"slices"
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

// NotRun says which scenarios did not run because a backend of the
// target could not start: "3 of 24 scenarios not run: the gateway backend
// could not start: …", or "" when every backend started.
func NotRun(reports []scenarios.Report) string {
	n := 0
	var why []string
	for i := range reports {
		r := &reports[i]
		if r.NotRun == "" {
			continue
		}
		n++
		reason := firstLine(r.NotRun)
		if !slices.Contains(why, reason) {
			why = append(why, reason)
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d scenarios not run: %s", n, len(reports), strings.Join(why, "; "))
}

// NeverReady says why the target never became ready, when no scenario
// ran with its backends up (every one not skipped was not run for a
// backend that could not start); "" otherwise.
func NeverReady(reports []scenarios.Report) string {
	var why string
	for i := range reports {
		r := &reports[i]
		switch {
		case r.NotRun != "":
			if why == "" {
				why = firstLine(r.NotRun)
			}
		case r.Result != scenarios.Skipped:
			return ""
		}
	}
	return why
}

// firstLine is s up to its first line break (a start-up error carries the
// process's last output on the lines after).
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}

// Headline is the verdict line: the verdict in a few words, saying when a
// certified run was partial ("certified, partial: 5 of 9 scenarios skipped: no
// tenant's data reached another tenant in what ran"), which scenarios
// did not run because a backend could not start ("LEAKS: …; 3 of 24
// scenarios not run: the gateway backend could not start: …"), and, when
// the target never became ready, that first and what was seen besides.
func (c *Certificate) Headline() string {
	if why := NeverReady(c.Scenarios); why != "" {
		line := "FAILED: the target never became ready (" + why + "); nothing is certified"
		if seen := c.seenBesides(); seen != "" {
			line += "; also seen: " + seen
		}
		return line
	}
	if c.Verdict != Certified {
		line := c.Verdict.Headline()
		if nr := NotRun(c.Scenarios); nr != "" {
			line += "; " + nr
		}
		return line
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
		return "certified" + accepted + ", partial: " + partial + tail + " in what ran; " + c.DidNotRun()
	}
	if accepted != "" {
		return "certified" + accepted + tail
	}
	return c.Verdict.Headline()
}

// seenBesides counts the findings of a run that also failed to start:
// "2 leak findings, 12 accepted findings".
func (c *Certificate) seenBesides() string {
	leaks, other := 0, 0
	for i := range c.Scenarios {
		for _, f := range c.Scenarios[i].Findings() {
			if f.Invariant.Leak() {
				leaks++
			} else {
				other++
			}
		}
	}
	var parts []string
	for _, p := range []struct {
		n    int
		what string
	}{{leaks, "leak finding"}, {other, "other finding"}, {c.AcceptedCount(), "accepted finding"}} {
		switch {
		case p.n == 1:
			parts = append(parts, "1 "+p.what)
		case p.n > 1:
			parts = append(parts, fmt.Sprintf("%d %ss", p.n, p.what))
		}
	}
	return strings.Join(parts, ", ")
}

// namesShown is how many names DidNotRun lists of each kind before it
// counts the rest.
const namesShown = 8

// DidNotRun names what of the catalog did not run: "not run:
// stdio-separate, gateway; checks not made: shared_place (3 scenarios),
// process_escape", or "" when everything ran. Each skip's reason is in
// the certificate's scenarios (Report.Reason, Report.Skipped).
func (c *Certificate) DidNotRun() string {
	var scen, checks []string
	count := map[string]int{}
	for i := range c.Scenarios {
		r := &c.Scenarios[i]
		if r.Result == scenarios.Skipped {
			scen = append(scen, r.ID)
			continue
		}
		for _, sk := range r.Skipped {
			if count[sk.Invariant] == 0 {
				checks = append(checks, sk.Invariant)
			}
			count[sk.Invariant]++
		}
	}
	list := func(names []string, label func(string) string) string {
		var out []string
		for i, n := range names {
			if i == namesShown {
				out = append(out, fmt.Sprintf("and %d more", len(names)-namesShown))
				break
			}
			out = append(out, label(n))
		}
		return strings.Join(out, ", ")
	}
	var parts []string
	if len(scen) > 0 {
		parts = append(parts, "not run: "+list(scen, func(s string) string { return s }))
	}
	if len(checks) > 0 {
		parts = append(parts, "checks not made: "+list(checks, func(inv string) string {
			if n := count[inv]; n > 1 {
				return fmt.Sprintf("%s (%d scenarios)", inv, n)
			}
			return inv
		}))
	}
	return strings.Join(parts, "; ")
}
