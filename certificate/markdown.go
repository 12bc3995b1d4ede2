package certificate

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/scenarios"
)

// MaxListed caps the findings the Markdown summary lists; the rest are
// counted and left to certificate.json.
const MaxListed = 50

// Headline is the verdict in a few words.
func (v Verdict) Headline() string {
	switch v {
	case Certified:
		return "certified: no tenant's data reached another tenant"
	case Leaks:
		return "LEAKS: a tenant's data reached another tenant"
	}
	return "FAILED: the harness or the target failed; nothing is certified"
}

// WriteMarkdown writes the short summary: the verdict, a table of
// scenarios, who reached whom (Reach), the findings, the skipped checks with their reasons, and how
// to read it.
func (c *Certificate) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## tenantcanary: %s\n\n", c.Headline())
	fmt.Fprintf(&b, "**Verdict: %s** (exit %d). Target %s", c.Verdict, ExitCode(c.Verdict), c.Target.Name)
	if c.Target.Version != "" {
		fmt.Fprintf(&b, " %s", c.Target.Version)
	}
	fmt.Fprintf(&b, ", tenants %s, %s, %s, %s.\n",
		c.tenantNames(), c.Date.Format("2006-01-02T15:04:05Z07:00"), c.Tool, seconds(c.Duration))
	if len(c.Target.Behaviours) > 0 {
		keys := make([]string, 0, len(c.Target.Behaviours))
		for k := range c.Target.Behaviours {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString("Declared behaviours (each judged as declared):")
		for _, k := range keys {
			fmt.Fprintf(&b, " %s: %s;", k, c.Target.Behaviours[k])
		}
		b.WriteString("\n")
	}
	if tm := c.Target.Times; tm != nil {
		how := "defaults"
		if tm.Scale > 1 {
			how = fmt.Sprintf("defaults scaled %.2gx by --timeout", tm.Scale)
		}
		if len(tm.FromTarget) > 0 {
			how += "; from the target file: " + strings.Join(tm.FromTarget, ", ")
		}
		fmt.Fprintf(&b, "Times waited on the target: a turn %v, a call %v, its ready line %v, its stop %v (%s).\n",
			tm.Turn, tm.Call, tm.Ready, tm.Stop, how)
	}
	if held, all := c.controls(); all > 0 {
		fmt.Fprintf(&b, "Positive controls: %d of %d held (each tenant's own canaries seen where they belong).\n", held, all)
	} else if len(c.Scenarios) > 0 {
		b.WriteString("Positive controls: none ran.\n")
	}
	if dp := c.DetectionPower; dp != nil {
		fmt.Fprintf(&b, "Detection power of this build: %d of %d seeded faults caught.\n", dp.Caught, dp.Seeded)
		for _, l := range dp.Failures() {
			fmt.Fprintf(&b, "- %s\n", code(l))
		}
		for _, u := range dp.Unseeded {
			fmt.Fprintf(&b, "- not seeded here: %s (%s)\n", code(u.Fault), u.Why)
		}
	} else {
		b.WriteString("Detection power: not measured in this run (`canary-run --self-test`).\n")
	}
	if c.Seed != 0 {
		fmt.Fprintf(&b, "Seed %d (tenant orders and interleavings; `canary-run --seed %d` replays them).\n", c.Seed, c.Seed)
	}
	if c.Error != "" {
		fmt.Fprintf(&b, "\nThe run failed: %s\n", code(c.Error))
	}

	if len(c.Scenarios) > 0 {
		b.WriteString("\n| scenario | result | phases | requests | snapshots | findings | duration |\n")
		b.WriteString("|---|---|---:|---:|---:|---:|---:|\n")
		for i := range c.Scenarios {
			r := &c.Scenarios[i]
			k := countsOf(r)
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %s |\n",
				cell(r.ID), k.result, k.phases, k.totals.Requests, k.totals.Snapshots, len(invariants.Dedup(k.findings)), seconds(r.Duration))
		}
	}

	if len(c.Scenarios) > 0 {
		// The findings open with who reached whom.
		b.WriteString("\n### Who reached whom\n\n")
		b.WriteString(ReachOf(c).Markdown())
	}

	var leaks, other []string
	for i := range c.Scenarios {
		r := &c.Scenarios[i]
		for _, p := range r.Phases {
			for _, f := range invariants.Dedup(p.Findings) {
				line := fmt.Sprintf("- %s, phase %s: %s", r.ID, p.Name, code(f.String()))
				if f.Invariant.Leak() {
					leaks = append(leaks, line)
				} else {
					other = append(other, line)
				}
			}
			for _, ctl := range p.Controls {
				if !ctl.Passed {
					other = append(other, fmt.Sprintf("- %s, phase %s: control failed for %s: %s %s", r.ID, p.Name, ctl.Tenant, ctl.Name, code(ctl.Detail)))
				}
			}
			if p.Error != "" {
				other = append(other, fmt.Sprintf("- %s, phase %s: %s", r.ID, p.Name, code(p.Error)))
			}
		}
		if res := Effective(r); res == scenarios.Failed && r.Reason != "" {
			other = append(other, fmt.Sprintf("- %s: %s", r.ID, code(r.Reason)))
		}
	}
	list := func(title string, lines []string) {
		if len(lines) == 0 {
			return
		}
		fmt.Fprintf(&b, "\n### %s (%d)\n\n", title, len(lines))
		for i, l := range lines {
			if i == MaxListed {
				fmt.Fprintf(&b, "- ... and %d more: see certificate.json\n", len(lines)-MaxListed)
				break
			}
			b.WriteString(l + "\n")
		}
	}
	list("Leaks", leaks)
	var accepted, expired []string
	for _, a := range c.Accepted {
		line := fmt.Sprintf("- %s, phase %s: %s: accepted until %s: %s", a.Scenario, a.Phase, code(a.Finding.String()), a.Expires, a.Reason)
		if a.Expired {
			expired = append(expired, line)
		} else {
			accepted = append(accepted, line)
		}
	}
	list("Accepted findings (known, not passed)", accepted)
	list("Expired acceptances (findings again)", expired)
	var why []string
	for i := range c.Scenarios {
		r := &c.Scenarios[i]
		for _, l := range Why(r) {
			why = append(why, fmt.Sprintf("- %s: %s", r.ID, code(l)))
		}
	}
	list("Why scenarios did not pass (first lines)", why)
	list("Harness, target, liveness and control failures (not leaks)", other)

	var skipped []string
	for i := range c.Scenarios {
		r := &c.Scenarios[i]
		if r.Result == scenarios.Skipped {
			skipped = append(skipped, fmt.Sprintf("- %s: the whole scenario: %s", r.ID, r.Reason))
		}
		for _, s := range r.Skipped {
			skipped = append(skipped, fmt.Sprintf("- %s: %s: %s", r.ID, s.Invariant, s.Reason))
		}
	}
	list("Skipped checks (not passed: not made)", skipped)

	if m := c.SurfaceMap(); m != nil {
		b.WriteString("\n### The target's surface (what the server touched, per action)\n\n")
		if err := m.WriteTable(&b); err != nil {
			return err
		}
	}

	b.WriteString("\n### How to read this\n\n")
	b.WriteString("Every tenant was given its own canaries (keys, model, workdir, memory, env markers). " +
		"After each phase every provider request, environment snapshot, file, log and RPC frame was scanned " +
		"for every other tenant's canaries in every encoding, and positive controls proved each tenant's own canaries were seen where they belong. " +
		"**certified** (exit 0): every scenario that ran passed. **leaks** (exit 1): a canary was found in a foreign place; each finding names where. " +
		"**failed** (exit 2): the harness or the target failed, so nothing is certified. " +
		"An **accepted** finding is one the target's known-findings file accepts, with a reason, until its expiry date: it is listed, never passed; " +
		"a run is certified with accepted findings only when every finding is accepted and unexpired. " +
		"Skipped checks were not made on this target and are never counted as passed. " +
		"Details: `certificate.json`; per phase: `junit.xml`.\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	return nil
}

// code renders s as a Markdown code span (safe for <, * and the like), on
// one line, for lists (not table cells).
func code(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return ""
	}
	fence := "`"
	for strings.Contains(s, fence) {
		fence += "`"
	}
	pad := ""
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		pad = " "
	}
	return fence + pad + s + pad + fence
}

// cell makes s safe in a table cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.Join(strings.Fields(s), " "), "|", `\|`)
}

// WriteTable writes the final table for a terminal: one row per scenario,
// who reached whom (Reach.Text) when any finding is in the matrix, and
// the verdict.
func (c *Certificate) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tRESULT\tPHASES\tREQUESTS\tSNAPSHOTS\tFINDINGS\tDURATION")
	for i := range c.Scenarios {
		r := &c.Scenarios[i]
		k := countsOf(r)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", r.ID, k.result, k.phases, k.totals.Requests, k.totals.Snapshots,
			len(invariants.Dedup(k.findings)), seconds(r.Duration))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	if r := ReachOf(c); !r.Empty() {
		if _, err := io.WriteString(w, r.Text()); err != nil {
			return fmt.Errorf("write table: %w", err)
		}
	}
	for i := range c.Scenarios {
		r := &c.Scenarios[i]
		for _, l := range Why(r) {
			if _, err := fmt.Fprintf(w, "why %s: %s\n", r.ID, l); err != nil {
				return fmt.Errorf("write table: %w", err)
			}
		}
	}
	if dp := c.DetectionPower; dp != nil {
		for _, l := range dp.Failures() {
			if _, err := fmt.Fprintf(w, "self-test: %s\n", l); err != nil {
				return fmt.Errorf("write table: %w", err)
			}
		}
	}
	for _, a := range c.Accepted {
		state := "accepted until " + a.Expires
		if a.Expired {
			state = "acceptance EXPIRED on " + a.Expires
		}
		if _, err := fmt.Fprintf(w, "known %s/%s: %s (%s: %s)\n", a.Scenario, a.Phase, a.Finding, state, a.Reason); err != nil {
			return fmt.Errorf("write table: %w", err)
		}
	}
	if c.Seed != 0 {
		if _, err := fmt.Fprintf(w, "seed: %d (replay with --seed %d)\n", c.Seed, c.Seed); err != nil {
			return fmt.Errorf("write table: %w", err)
		}
	}
	if c.Error != "" {
		if _, err := fmt.Fprintf(w, "run failed: %s\n", c.Error); err != nil {
			return fmt.Errorf("write table: %w", err)
		}
	}
	if _, err := fmt.Fprintf(w, "verdict: %s (exit %d) in %s\n", c.Headline(), ExitCode(c.Verdict), seconds(c.Duration)); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// controls counts the positive controls that held, and all of them.
func (c *Certificate) controls() (held, all int) {
	for _, r := range c.Scenarios {
		for _, p := range r.Phases {
			for _, ctl := range p.Controls {
				all++
				if ctl.Passed {
					held++
				}
			}
		}
	}
	return held, all
}

// WhyLines is how many lines of a failed scenario's reason the console
// and summary.md show; certificate.json and junit.xml carry all of them.
const WhyLines = 3

// Why is the first lines of why scenario r did not pass (its log, else
// its reason, each cut to one line of at most 300 bytes); nil when it
// passed or was skipped.
func Why(r *scenarios.Report) []string {
	res := Effective(r)
	if res == scenarios.Pass || res == scenarios.Skipped {
		return nil
	}
	src := r.Log
	if len(src) == 0 && r.Reason != "" {
		src = []string{r.Reason}
	}
	var out []string
	for _, m := range src {
		for _, l := range strings.Split(m, "\n") {
			l = strings.Join(strings.Fields(l), " ")
			if l == "" {
				continue
			}
			if len(l) > 300 {
				l = l[:300] + "..."
			}
			out = append(out, l)
			if len(out) == WhyLines {
				return out
			}
		}
	}
	return out
}
