package certificate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/surface"
	"github.com/tenantcanary/tenantcanary/internal/version"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/scenarios"
)

// ToolName is the name the certificate gives the tool that produced it.
const ToolName = "tenantcanary"

// Verdict is the run's conclusion.
type Verdict string

const (
	Certified Verdict = "certified" // every scenario that ran passed, and at least one ran
	Leaks     Verdict = "leaks"     // at least one cross-tenant leak was found
	Failed    Verdict = "failed"    // the harness or the target failed, or nothing ran
)

// Exit codes of a canary run, one per verdict.
const (
	ExitCertified = 0
	ExitLeaks     = 1
	ExitFailed    = 2
)

// ErrFormat: a certificate could not be read back.
var ErrFormat = errors.New("not a tenantcanary certificate")

// Tool names the harness build that produced the certificate: its
// version and the commit it was built from (see internal/version: under
// `go run` the commit is read from the checkout's .git, and CommitSource
// says so).
type Tool struct {
	Name         string `json:"name"`
	Version      string `json:"version"`
	Commit       string `json:"commit,omitempty"`
	Modified     bool   `json:"modified,omitempty"`
	CommitSource string `json:"commit_source,omitempty"`
}

// String is the tool's name, version and commit, as the summary shows it.
func (t Tool) String() string {
	in := version.Info{Version: t.Version, Commit: t.Commit, Modified: t.Modified, CommitSource: t.CommitSource}
	return t.Name + " " + in.String()
}

// ThisTool is the running build.
func ThisTool() Tool {
	in := version.Get()
	return Tool{Name: ToolName, Version: in.Version, Commit: in.Commit, Modified: in.Modified, CommitSource: in.CommitSource}
}

// Target names the server under test.
type Target struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	// Behaviours are the target's declared behaviours where servers
	// legitimately differ (unknown_profile: error or fallback_to_launch),
	// each judged as declared.
	Behaviours map[string]string `json:"declared_behaviours,omitempty"`
	// Times are how long the run waited on the target (a turn, a call,
	// its ready line, its stop): the target file's values, else the
	// defaults scaled by --timeout.
	Times *harness.Times `json:"times,omitempty"`
}

// Tenant is one tenant of the run. Each scenario builds its tenants afresh,
// with new random tags: Tags lists every tag the tenant's canaries had, in
// scenario order (each scenario's own is in its report's roster).
type Tenant struct {
	Name   string   `json:"name"`
	Launch bool     `json:"launch"` // the launch profile
	Tags   []string `json:"tags,omitempty"`
}

// TenantsOf gathers the tenants of every report's roster, in order of
// first appearance, with every distinct tag each had.
func TenantsOf(reports []scenarios.Report) []Tenant {
	var out []Tenant
	at := map[string]int{}
	for _, r := range reports {
		for _, ti := range r.Roster {
			i, ok := at[ti.Name]
			if !ok {
				i = len(out)
				at[ti.Name] = i
				out = append(out, Tenant{Name: ti.Name})
			}
			t := &out[i]
			t.Launch = t.Launch || ti.Launch
			if ti.Tag != "" && !slices.Contains(t.Tags, ti.Tag) {
				t.Tags = append(t.Tags, ti.Tag)
			}
		}
	}
	return out
}

// FaultResult is one seeded fault of a self-test and whether the catalog
// caught it (issue 8).
type FaultResult struct {
	Fault    string `json:"fault"`
	Scenario string `json:"scenario"`
	Expected string `json:"expected"` // the invariant that should catch it
	Caught   bool   `json:"caught"`
	Findings int    `json:"findings"`
	CleanRun bool   `json:"clean_run_clean"` // the same scenario with the fault off found nothing
	// Missed says why the fault was not caught, and CleanWhy why the clean
	// run was not clean (its findings, failed controls or phases): a
	// self-test that fails names what failed.
	Missed   string `json:"missed,omitempty"`
	CleanWhy string `json:"clean_why,omitempty"`
}

// Failures names every fault the self-test missed and every clean run
// that was not clean, one line each, with why.
func (d *DetectionPower) Failures() []string {
	var out []string
	unclean := map[string]bool{}
	for _, f := range d.Faults {
		if !f.Caught {
			out = append(out, fmt.Sprintf("fault %s MISSED by %s (expected %s): %s", f.Fault, f.Scenario, f.Expected, orUnknown(f.Missed)))
		}
		if !f.CleanRun && !unclean[f.Scenario] {
			unclean[f.Scenario] = true // one clean run serves every fault of a scenario
			out = append(out, fmt.Sprintf("clean run of %s (faults %s) was NOT CLEAN: %s", f.Scenario, strings.Join(d.faultsOf(f.Scenario), ", "), orUnknown(f.CleanWhy)))
		}
	}
	return out
}

// faultsOf lists the faults whose scenario is id.
func (d *DetectionPower) faultsOf(id string) []string {
	var out []string
	for _, f := range d.Faults {
		if f.Scenario == id {
			out = append(out, f.Fault)
		}
	}
	return out
}

func orUnknown(s string) string {
	if s == "" {
		return "no reason recorded"
	}
	return s
}

// DetectionPower is how many seeded faults the harness build caught.
type DetectionPower struct {
	Caught int           `json:"caught"`
	Seeded int           `json:"seeded"`
	Faults []FaultResult `json:"faults"`
	// Unseeded are the faults this machine could not seed, and why: a
	// fault that takes away one tool sandbox's defence changes nothing
	// where agentd runs its tools under another.
	Unseeded []UnseededFault `json:"unseeded,omitempty"`
}

// UnseededFault is a fault a self-test left out on this machine.
type UnseededFault struct {
	Fault string `json:"fault"`
	Why   string `json:"why"`
}

// Certificate is a canary run's record.
type Certificate struct {
	Tool      Tool               `json:"tool"`
	Target    Target             `json:"target"`
	Date      time.Time          `json:"date"` // RFC3339, UTC, whole seconds
	Tenants   []Tenant           `json:"tenants"`
	Scenarios []scenarios.Report `json:"scenarios"`
	Verdict   Verdict            `json:"verdict"`
	// Error is a failure of the run as a whole (the catalog could not run);
	// the verdict is then Failed.
	Error string `json:"error,omitempty"`
	// DetectionPower is nil when no self-test ran with this build.
	DetectionPower *DetectionPower `json:"detection_power"`
	Duration       time.Duration   `json:"duration_ns"`
	// Shard is set when the run was one slice of the catalog
	// (canary-run --shard K/N); Merge joins the slices.
	Shard *Shard `json:"shard,omitempty"`
	// Seed is the run's seed (tenant orders, interleavings): `canary-run
	// --seed N` replays them.
	Seed uint64 `json:"seed,omitempty"`
	// Accepted are the findings the target's known-findings file matched
	// (see Accept): accepted ones, and expired ones, which count again.
	Accepted []AcceptedFinding `json:"accepted_findings,omitempty"`
	// certificate.json also carries "reach", the who-reached-whom matrix
	// (ReachOf): WriteJSON computes it from the findings, so it is never
	// stale.
}

// SurfaceMap is the surface the run's discovery learned (the surface
// scenario's map), or nil when it did not run.
func (c *Certificate) SurfaceMap() *surface.Map {
	for i := range c.Scenarios {
		if m := c.Scenarios[i].Surface; m != nil {
			return m
		}
	}
	return nil
}

// New makes the certificate of a run that ended now, taking the verdict
// from the reports.
func New(target Target, tenants []Tenant, reports []scenarios.Report, elapsed time.Duration) *Certificate {
	return &Certificate{
		Tool:      ThisTool(),
		Target:    target,
		Date:      time.Now().UTC().Truncate(time.Second),
		Tenants:   tenants,
		Scenarios: reports,
		Verdict:   VerdictOf(reports),
		Duration:  elapsed,
	}
}

// Fail records a failure of the run as a whole: the verdict becomes
// Failed, unless a leak was already found.
func (c *Certificate) Fail(err error) {
	if err == nil {
		return
	}
	c.Error = err.Error()
	if c.Verdict != Leaks {
		c.Verdict = Failed
	}
}

// ToolVersion is this build's version and commit in one line.
func ToolVersion() string { return version.Get().String() }

// Effective is the result a report counts as: its Result, except that a
// "pass" holding a leak finding counts as a leak and one holding another
// finding or a phase error as a failure, and an unknown result as a
// failure. The certificate never passes what its own findings contradict.
func Effective(r *scenarios.Report) scenarios.Result {
	switch r.Result {
	case scenarios.Leak, scenarios.Failed, scenarios.Skipped:
		return r.Result
	case scenarios.Pass, Accepted:
	default:
		return scenarios.Failed
	}
	res := scenarios.Pass
	if r.Result == Accepted {
		res = Accepted
	}
	for _, p := range r.Phases {
		if p.Error != "" {
			res = scenarios.Failed
		}
		for _, f := range p.Findings {
			if f.Invariant.Leak() {
				return scenarios.Leak
			}
			res = scenarios.Failed
		}
		for _, c := range p.Controls {
			if !c.Passed {
				res = scenarios.Failed
			}
		}
	}
	return res
}

// VerdictOf concludes a run from its reports: Failed when the target
// never became ready (every scenario that was not skipped was not run
// for a backend that could not start), whatever else was seen; Leaks
// when any scenario leaked; otherwise Failed when any failed or when none
// ran (no reports, or every one skipped); otherwise Certified.
func VerdictOf(reports []scenarios.Report) Verdict {
	if NeverReady(reports) != "" {
		return Failed
	}
	ran, failed := 0, false
	for i := range reports {
		switch Effective(&reports[i]) {
		case scenarios.Leak:
			return Leaks
		case scenarios.Failed:
			failed = true
			ran++
		case scenarios.Pass, Accepted:
			ran++
		}
	}
	if failed || ran == 0 {
		return Failed
	}
	return Certified
}

// ExitCode is the process exit code of a verdict: 0 certified, 1 leaks, 2
// failed (and for anything unknown).
func ExitCode(v Verdict) int {
	switch v {
	case Certified:
		return ExitCertified
	case Leaks:
		return ExitLeaks
	}
	return ExitFailed
}

// WriteJSON writes the certificate as indented JSON, with its
// who-reached-whom matrix (ReachOf) as "reach", computed from the findings
// as they are now (ReadJSON need not read it back: ReachOf gives it).
func (c *Certificate) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	r := ReachOf(c)
	withReach := struct {
		*Certificate
		VerdictLine string `json:"verdict_line"`
		Reach       *Reach `json:"reach,omitempty"`
	}{c, c.Headline(), &r}
	if err := enc.Encode(withReach); err != nil {
		return fmt.Errorf("write certificate json: %w", err)
	}
	return nil
}

// ReadJSON reads a certificate WriteJSON wrote.
func ReadJSON(r io.Reader) (*Certificate, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read certificate: %w", err)
	}
	var c Certificate
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("read certificate: %w: %w", ErrFormat, err)
	}
	if c.Tool.Name != ToolName {
		return nil, fmt.Errorf("read certificate: tool %q, want %q: %w", c.Tool.Name, ToolName, ErrFormat)
	}
	switch c.Verdict {
	case Certified, Leaks, Failed:
	default:
		return nil, fmt.Errorf("read certificate: verdict %q: %w", c.Verdict, ErrFormat)
	}
	return &c, nil
}

// counts is what the tables show for a report.
type counts struct {
	result   scenarios.Result
	phases   int
	totals   scenarios.Counts
	findings []invariants.Finding
}

func countsOf(r *scenarios.Report) counts {
	fs := r.Findings()
	return counts{result: Effective(r), phases: len(r.Phases), totals: r.Totals(), findings: fs}
}

// seconds renders d as seconds for tables: "1.2s".
func seconds(d time.Duration) string {
	return fmt.Sprintf("%.1fs", d.Seconds())
}

// maxNamed caps the tenants a summary line names.
const maxNamed = 6

// tenantNames lists the tenants, the launch one marked, the first few only
// when there are many.
func (c *Certificate) tenantNames() string {
	names := make([]string, 0, len(c.Tenants))
	for _, t := range c.Tenants {
		n := t.Name
		if t.Launch {
			n += " (launch)"
		}
		names = append(names, n)
	}
	if len(names) > maxNamed {
		return fmt.Sprintf("%s, ... (%d in all)", strings.Join(names[:maxNamed-1], ", "), len(names))
	}
	return strings.Join(names, ", ")
}
