package certificate

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/scenarios"
)

// The JUnit XML shapes, within Jenkins' junit-10.xsd (the schema Jenkins,
// GitLab and GitHub test views read): the root carries no skipped count
// (the schema has none there); each suite does.
type (
	// JUnitSuites is the root element.
	JUnitSuites struct {
		XMLName  xml.Name     `xml:"testsuites"`
		Name     string       `xml:"name,attr"`
		Tests    int          `xml:"tests,attr"`
		Failures int          `xml:"failures,attr"`
		Errors   int          `xml:"errors,attr"`
		Time     string       `xml:"time,attr"`
		Suites   []JUnitSuite `xml:"testsuite"`
	}
	// JUnitSuite is one scenario.
	JUnitSuite struct {
		Name       string          `xml:"name,attr"`
		Tests      int             `xml:"tests,attr"`
		Failures   int             `xml:"failures,attr"`
		Errors     int             `xml:"errors,attr"`
		Skipped    int             `xml:"skipped,attr"`
		Time       string          `xml:"time,attr"`
		Timestamp  string          `xml:"timestamp,attr,omitempty"`
		Properties []JUnitProperty `xml:"properties>property,omitempty"`
		Cases      []JUnitCase     `xml:"testcase"`
		SystemOut  string          `xml:"system-out,omitempty"`
	}
	// JUnitProperty is a name and value.
	JUnitProperty struct {
		Name  string `xml:"name,attr"`
		Value string `xml:"value,attr"`
	}
	// JUnitCase is one phase.
	JUnitCase struct {
		Name      string        `xml:"name,attr"`
		Classname string        `xml:"classname,attr"`
		Time      string        `xml:"time,attr"`
		Failure   *JUnitProblem `xml:"failure,omitempty"`
		Error     *JUnitProblem `xml:"error,omitempty"`
		Skipped   *JUnitProblem `xml:"skipped,omitempty"`
	}
	// JUnitProblem is a failure, error or skip: a message and a body.
	JUnitProblem struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr,omitempty"`
		Text    string `xml:",chardata"`
	}
)

// secs renders d in seconds, as JUnit wants.
func secs(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }

// JUnit is the certificate as JUnit test suites: one suite per scenario,
// one case per phase; a phase with findings has a <failure> listing every
// finding one a line, a phase that ended in a harness or target error an
// <error>; a skipped scenario is one <skipped> case with the reason, and so
// is every check skipped inside a scenario that ran ("check file"), so a
// CI reporter never counts it as passed. A failed scenario whose failure no
// phase shows gets a "scenario" case with an <error> holding the reason.
func (c *Certificate) JUnit() JUnitSuites {
	root := JUnitSuites{Name: ToolName + " " + c.Target.Name, Time: secs(c.Duration)}
	if c.Error != "" {
		root.Suites = append(root.Suites, JUnitSuite{
			Name: "canary-run", Tests: 1, Errors: 1, Time: secs(0),
			Cases: []JUnitCase{{Name: "run", Classname: "canary-run", Time: secs(0),
				Error: &JUnitProblem{Message: oneLine(c.Error), Type: "harness", Text: c.Error}}},
		})
	}
	for i := range c.Scenarios {
		s := suiteOf(&c.Scenarios[i], c.Date)
		for _, a := range c.Accepted {
			if a.Scenario != s.Name {
				continue
			}
			name := "accepted_finding " + a.Phase
			if a.Expired {
				name = "expired_acceptance " + a.Phase
			}
			s.Properties = append(s.Properties, JUnitProperty{name, fmt.Sprintf("%s (until %s: %s)", a.Finding, a.Expires, a.Reason)})
		}
		root.Suites = append(root.Suites, s)
	}
	for _, s := range root.Suites {
		root.Tests += s.Tests
		root.Failures += s.Failures
		root.Errors += s.Errors
	}
	return root
}

func suiteOf(r *scenarios.Report, date time.Time) JUnitSuite {
	s := JUnitSuite{Name: r.ID, Time: secs(r.Duration), Timestamp: date.Format(time.RFC3339)}
	s.Properties = append(s.Properties,
		JUnitProperty{"purpose", r.Purpose},
		JUnitProperty{"result", string(Effective(r))},
		JUnitProperty{"tenants", fmt.Sprint(r.Tenants)})
	for _, f := range r.Focus {
		s.Properties = append(s.Properties, JUnitProperty{"focus", string(f)})
	}
	for _, sk := range r.Skipped {
		s.Properties = append(s.Properties, JUnitProperty{"skipped_check " + sk.Invariant, sk.Reason})
	}
	if r.Result == scenarios.Skipped {
		s.Cases = append(s.Cases, JUnitCase{Name: r.ID, Classname: r.ID, Time: secs(r.Duration),
			Skipped: &JUnitProblem{Message: r.Reason}})
	}
	shown := false // a phase shows why the scenario did not pass
	for _, p := range r.Phases {
		tc := JUnitCase{Name: p.Name, Classname: r.ID, Time: secs(p.Duration)}
		if r.Result == scenarios.Skipped {
			tc.Skipped = &JUnitProblem{Message: r.Reason}
			s.Cases = append(s.Cases, tc)
			continue
		}
		var failedControls []string
		for _, ctl := range p.Controls {
			if !ctl.Passed {
				failedControls = append(failedControls, fmt.Sprintf("control failed: %s: %s %s", ctl.Tenant, ctl.Name, ctl.Detail))
			}
		}
		switch {
		case len(p.Findings) > 0 || len(failedControls) > 0:
			tc.Failure = &JUnitProblem{Message: problemSummary(p.Findings, len(failedControls)), Type: problemType(p.Findings)}
			var lines []string
			if len(p.Findings) > 0 {
				lines = append(lines, invariants.Format(p.Findings))
			}
			lines = append(lines, failedControls...)
			if p.Error != "" {
				lines = append(lines, "phase error: "+p.Error)
			}
			tc.Failure.Text = strings.Join(lines, "\n")
			shown = true
		case p.Error != "":
			tc.Error = &JUnitProblem{Message: oneLine(p.Error), Type: "harness", Text: p.Error}
			shown = true
		}
		s.Cases = append(s.Cases, tc)
	}
	if res := Effective(r); (res == scenarios.Failed || res == scenarios.Leak) && !shown {
		reason := r.Reason
		if reason == "" {
			reason = "the scenario " + string(res) + " without saying why"
		}
		s.Cases = append(s.Cases, JUnitCase{Name: "scenario", Classname: r.ID, Time: secs(0),
			Error: &JUnitProblem{Message: oneLine(reason), Type: "harness", Text: reason}})
	}
	if r.Result != scenarios.Skipped {
		for _, sk := range r.Skipped {
			s.Cases = append(s.Cases, JUnitCase{Name: "check " + sk.Invariant, Classname: r.ID, Time: secs(0),
				Skipped: &JUnitProblem{Message: sk.Reason}})
		}
	}
	if r.Result != scenarios.Pass && len(r.Log) > 0 {
		s.SystemOut = strings.Join(r.Log, "\n")
	}
	for _, tc := range s.Cases {
		s.Tests++
		switch {
		case tc.Failure != nil:
			s.Failures++
		case tc.Error != nil:
			s.Errors++
		case tc.Skipped != nil:
			s.Skipped++
		}
	}
	return s
}

func problemSummary(fs []invariants.Finding, controls int) string {
	leaks, other := 0, 0
	for _, f := range invariants.Dedup(fs) {
		if f.Invariant.Leak() {
			leaks++
		} else {
			other++
		}
	}
	var parts []string
	if leaks > 0 {
		parts = append(parts, fmt.Sprintf("%d cross-tenant leak(s)", leaks))
	}
	if other > 0 {
		parts = append(parts, fmt.Sprintf("%d harness, liveness or control failure(s)", other))
	}
	if controls > 0 {
		parts = append(parts, fmt.Sprintf("%d failed control(s)", controls))
	}
	return strings.Join(parts, ", ")
}

func problemType(fs []invariants.Finding) string {
	for _, f := range fs {
		if f.Invariant.Leak() {
			return "leak"
		}
	}
	return "harness"
}

// oneLine is the first line of s, for an attribute.
func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// WriteJUnit writes the certificate as JUnit XML.
func (c *Certificate) WriteJUnit(w io.Writer) error {
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return fmt.Errorf("write junit: %w", err)
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(c.JUnit()); err != nil {
		return fmt.Errorf("write junit: %w", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("write junit: %w", err)
	}
	if _, err := io.WriteString(w, "\n"); err != nil {
		return fmt.Errorf("write junit: %w", err)
	}
	return nil
}
