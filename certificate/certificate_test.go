package certificate

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/invariants/scan"
	"github.com/tenantcanary/tenantcanary/scenarios"
)

func intp(i int) *int { return &i }

var (
	leakFinding = invariants.Finding{
		Invariant: invariants.Request, Tenant: "alpha", Owner: "beta", Kind: "provider_key",
		Where:    invariants.Where{Request: intp(3), Path: "/v1/chat/completions", Part: "body"},
		Encoding: scan.Base64, Excerpt: "...cHJvdmlkZXIta2V5LWJldGE...",
	}
	fileFinding = invariants.Finding{
		Invariant: invariants.File, Tenant: "beta", Owner: "alpha", Kind: "memory",
		Where: invariants.Where{Path: "home/profiles/beta/memory.md|<x>"}, Encoding: scan.Raw, Excerpt: "memory-alpha-0011223344",
	}
	controlFinding = invariants.Finding{
		Invariant: invariants.Control, Tenant: "beta", Detail: "beta's provider never saw beta's key",
	}
)

func passing(id string) scenarios.Report {
	return scenarios.Report{
		ID: id, Purpose: "passes", Focus: []scenarios.Invariant{scenarios.Requests}, Tenants: 3,
		Result: scenarios.Pass, Duration: 1500 * time.Millisecond,
		Phases: []scenarios.PhaseReport{
			{Name: "turns", Duration: time.Second, Counts: scenarios.Counts{Requests: 6, Snapshots: 3, Frames: 40},
				Controls: []scenarios.Control{{Tenant: "alpha", Name: "own key on own provider", Passed: true}}},
			{Name: "cron", Duration: 500 * time.Millisecond, Counts: scenarios.Counts{Requests: 9, Snapshots: 6, Frames: 60}},
		},
	}
}

func leaking(id string) scenarios.Report {
	r := passing(id)
	r.Result = scenarios.Leak
	r.Phases[1].Findings = []invariants.Finding{leakFinding, fileFinding, leakFinding}
	r.Phases[1].Counts.Findings = 3
	r.Log = []string{"phase cron: 2 leaks"}
	return r
}

func failing(id string) scenarios.Report {
	r := passing(id)
	r.Result = scenarios.Failed
	r.Reason = "target not ready: no ready line within 10s"
	r.Phases = r.Phases[:1]
	r.Phases[0].Error = "start serve: no ready line within 10s"
	return r
}

func skipped(id string) scenarios.Report {
	return scenarios.Report{ID: id, Purpose: "needs files", Tenants: 3, Result: scenarios.Skipped,
		Reason: "the target's files are out of reach (staging)"}
}

func sample(reports ...scenarios.Report) *Certificate {
	c := New(Target{Name: "agentd", Version: "agentd/0.1"},
		[]Tenant{{Name: "default", Tags: []string{"0123456789"}, Launch: true}, {Name: "alpha", Tags: []string{"abcdef0123"}}, {Name: "beta", Tags: []string{"fedcba9876"}}},
		reports, 3*time.Second)
	return c
}

func TestVerdictAndExitCode(t *testing.T) {
	t.Parallel()
	withCheck := passing("scope")
	withCheck.Skipped = []scenarios.SkippedCheck{{Invariant: "file", Reason: "remote"}}
	passWithLeak := passing("liar")
	passWithLeak.Phases[0].Findings = []invariants.Finding{leakFinding}
	passWithControl := passing("liar2")
	passWithControl.Phases[0].Controls[0].Passed = false
	for _, tc := range []struct {
		name    string
		reports []scenarios.Report
		want    Verdict
		code    int
	}{
		{"all pass", []scenarios.Report{passing("a"), passing("b")}, Certified, 0},
		{"pass and skipped", []scenarios.Report{passing("a"), skipped("b"), withCheck}, Certified, 0},
		{"a leak", []scenarios.Report{passing("a"), leaking("b")}, Leaks, 1},
		{"a failure", []scenarios.Report{passing("a"), failing("b")}, Failed, 2},
		{"a leak outranks a failure", []scenarios.Report{failing("a"), leaking("b")}, Leaks, 1},
		{"nothing ran", nil, Failed, 2},
		{"everything skipped", []scenarios.Report{skipped("a"), skipped("b")}, Failed, 2},
		{"a pass holding a leak is a leak", []scenarios.Report{passWithLeak}, Leaks, 1},
		{"a pass with a failed control is a failure", []scenarios.Report{passWithControl}, Failed, 2},
		{"an unknown result is a failure", []scenarios.Report{{ID: "x", Result: "weird"}}, Failed, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := VerdictOf(tc.reports)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.code, ExitCode(got))
		})
	}
	require.Equal(t, 2, ExitCode("bogus"))
}

func TestFailKeepsLeaks(t *testing.T) {
	t.Parallel()
	c := sample(passing("a"))
	require.Equal(t, Certified, c.Verdict)
	c.Fail(errors.New("interrupted"))
	require.Equal(t, Failed, c.Verdict)
	require.Equal(t, "interrupted", c.Error)

	c = sample(leaking("a"))
	c.Fail(errors.New("interrupted"))
	require.Equal(t, Leaks, c.Verdict)
}

func TestNewStampsToolAndDate(t *testing.T) {
	t.Parallel()
	c := sample(passing("a"))
	require.Equal(t, ToolName, c.Tool.Name)
	require.NotEmpty(t, c.Tool.Version)
	require.Equal(t, time.UTC, c.Date.Location())
	require.Zero(t, c.Date.Nanosecond())
	require.WithinDuration(t, time.Now(), c.Date, time.Minute)
	require.Nil(t, c.DetectionPower)
}

func TestJSONRoundTrip(t *testing.T) {
	t.Parallel()
	c := sample(passing("pooled-serve"), leaking("gateway"), failing("restart"), skipped("files"))
	c.DetectionPower = &DetectionPower{Caught: 1, Seeded: 2, Faults: []FaultResult{
		{Fault: "model-bleed", Scenario: "pooled-serve", Expected: "launch_bleed", Caught: true, Findings: 2, CleanRun: true},
		{Fault: "shared-shell", Scenario: "shell-reuse", Expected: "env_snapshot"},
	}}
	var buf bytes.Buffer
	require.NoError(t, c.WriteJSON(&buf))
	require.Contains(t, buf.String(), `"date": "`+c.Date.Format(time.RFC3339)+`"`)
	require.Regexp(t, `"date": "\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"`, buf.String())
	require.Contains(t, buf.String(), `"verdict": "leaks"`)
	back, err := ReadJSON(&buf)
	require.NoError(t, err)
	require.Equal(t, c, back)
	require.Equal(t, Leaks, VerdictOf(back.Scenarios))

	// No self-test: the field is there, null.
	c2 := sample(passing("a"))
	buf.Reset()
	require.NoError(t, c2.WriteJSON(&buf))
	require.Contains(t, buf.String(), `"detection_power": null`)
	back, err = ReadJSON(&buf)
	require.NoError(t, err)
	require.Nil(t, back.DetectionPower)
}

func TestReadJSONRefusesOtherFiles(t *testing.T) {
	t.Parallel()
	for _, in := range []string{`{}`, `[1,2]`, `not json`, `{"tool":{"name":"tenantcanary"},"verdict":"maybe"}`} {
		_, err := ReadJSON(strings.NewReader(in))
		require.ErrorIs(t, err, ErrFormat, in)
	}
}

func TestJUnitParsesBackWithCounts(t *testing.T) {
	t.Parallel()
	c := sample(passing("pooled-serve"), leaking("gateway"), failing("restart"), skipped("files"))
	var buf bytes.Buffer
	require.NoError(t, c.WriteJUnit(&buf))
	require.True(t, strings.HasPrefix(buf.String(), `<?xml version="1.0" encoding="UTF-8"?>`))

	var got JUnitSuites
	require.NoError(t, xml.Unmarshal(buf.Bytes(), &got))
	require.Len(t, got.Suites, 4)
	// pass: 2 phases; leak: 2 phases (one failure); failed: 1 phase
	// (error); skipped: 1 skipped case.
	require.Equal(t, 6, got.Tests)
	require.Equal(t, 1, got.Failures)
	require.Equal(t, 1, got.Errors)
	skips := 0
	for _, s := range got.Suites {
		skips += s.Skipped
	}
	require.Equal(t, 1, skips)
	require.Equal(t, "3.000", got.Time)

	byName := map[string]JUnitSuite{}
	for _, s := range got.Suites {
		byName[s.Name] = s
	}
	pass := byName["pooled-serve"]
	require.Equal(t, 2, pass.Tests)
	require.Zero(t, pass.Failures+pass.Errors+pass.Skipped)
	require.Equal(t, "1.000", pass.Cases[0].Time)
	require.Equal(t, "0.500", pass.Cases[1].Time)
	require.Equal(t, "turns", pass.Cases[0].Name)
	require.Equal(t, "pooled-serve", pass.Cases[0].Classname)
	require.Empty(t, pass.SystemOut, "a passing scenario is quiet")

	leak := byName["gateway"]
	require.Equal(t, 1, leak.Failures)
	require.Nil(t, leak.Cases[0].Failure)
	f := leak.Cases[1].Failure
	require.NotNil(t, f)
	require.Equal(t, "leak", f.Type)
	require.Equal(t, "2 cross-tenant leak(s)", f.Message)
	// every finding, one a line (the repeat deduplicated)
	require.Contains(t, f.Text, leakFinding.String()+"\n")
	require.Contains(t, f.Text, fileFinding.String())
	require.Equal(t, 1, strings.Count(f.Text, leakFinding.String()))
	require.Equal(t, "phase cron: 2 leaks", leak.SystemOut)

	failed := byName["restart"]
	require.Equal(t, 1, failed.Errors)
	require.NotNil(t, failed.Cases[0].Error)
	require.Equal(t, "start serve: no ready line within 10s", failed.Cases[0].Error.Message)

	skip := byName["files"]
	require.Len(t, skip.Cases, 1)
	require.NotNil(t, skip.Cases[0].Skipped)
	require.Equal(t, "the target's files are out of reach (staging)", skip.Cases[0].Skipped.Message)
}

func TestJUnitShowsFailuresNoPhaseShows(t *testing.T) {
	t.Parallel()
	noPhase := scenarios.Report{ID: "setup", Result: scenarios.Failed, Reason: "build tenants: listen: address in use"}
	control := passing("control")
	control.Result = scenarios.Failed
	control.Phases[0].Findings = []invariants.Finding{controlFinding}
	c := sample(noPhase, control)
	c.Fail(errors.New("interrupted"))
	var buf bytes.Buffer
	require.NoError(t, c.WriteJUnit(&buf))
	var got JUnitSuites
	require.NoError(t, xml.Unmarshal(buf.Bytes(), &got))
	require.Len(t, got.Suites, 3)
	require.Equal(t, "canary-run", got.Suites[0].Name)
	require.Equal(t, "interrupted", got.Suites[0].Cases[0].Error.Message)
	require.Equal(t, "scenario", got.Suites[1].Cases[0].Name)
	require.Equal(t, "build tenants: listen: address in use", got.Suites[1].Cases[0].Error.Message)
	f := got.Suites[2].Cases[0].Failure
	require.NotNil(t, f)
	require.Equal(t, "harness", f.Type)
	require.Contains(t, f.Text, "not leaks")
	require.Contains(t, f.Text, controlFinding.String())
	require.Equal(t, 2, got.Errors)
	require.Equal(t, 1, got.Failures)
}

func TestMarkdownSummary(t *testing.T) {
	t.Parallel()
	withSkip := passing("gateway-keys")
	withSkip.Skipped = []scenarios.SkippedCheck{{Invariant: "file", Reason: "the target's files are out of reach"}}
	c := sample(passing("pooled-serve"), leaking("settings"), failing("restart"), skipped("files"), withSkip)
	var buf bytes.Buffer
	require.NoError(t, c.WriteMarkdown(&buf))
	md := buf.String()
	t.Log("\n" + md)

	lines := strings.Split(md, "\n")
	require.Equal(t, "## tenantcanary: LEAKS: a tenant's data reached another tenant", lines[0])
	for _, want := range []string{
		"**Verdict: leaks** (exit 1). Target agentd agentd/0.1, tenants default (launch), alpha, beta, ",
		"Detection power: not measured",
		"Positive controls: 4 of 4 held",
		"| scenario | result | phases | requests | snapshots | findings | duration |\n",
		"| pooled-serve | pass | 2 | 9 | 6 | 0 | 1.5s |\n",
		"| settings | leak | 2 | 9 | 6 | 2 | 1.5s |\n",
		"| restart | failed | 1 | 6 | 3 | 0 | 1.5s |\n",
		"| files | skipped | 0 | 0 | 0 | 0 | 0.0s |\n",
		"### Leaks (2)\n",
		"- settings, phase cron: `" + leakFinding.String() + "`\n",
		"- settings, phase cron: `" + fileFinding.String() + "`\n",
		"### Harness, target, liveness and control failures (not leaks) (2)\n",
		"- restart, phase turns: `start serve: no ready line within 10s`",
		"- restart: `target not ready: no ready line within 10s`",
		"### Skipped checks (not passed: not made) (2)\n",
		"- files: the whole scenario: the target's files are out of reach (staging)\n",
		"- gateway-keys: file: the target's files are out of reach\n",
		"### How to read this",
	} {
		require.Contains(t, md, want)
	}
	// The verdict line comes first, then the table, the findings, the skips, the help.
	order := []string{"**Verdict", "| scenario |", "### Leaks", "### Skipped", "### How to read"}
	for i := 1; i < len(order); i++ {
		require.Less(t, strings.Index(md, order[i-1]), strings.Index(md, order[i]), order[i])
	}

	noControls := failing("x")
	noControls.Phases = nil
	buf.Reset()
	require.NoError(t, sample(noControls).WriteMarkdown(&buf))
	require.Contains(t, buf.String(), "Positive controls: none ran.")

	c = sample(passing("a"))
	for i := range 30 {
		c.Tenants = append(c.Tenants, Tenant{Name: fmt.Sprintf("t%03d", i)})
	}
	c.DetectionPower = &DetectionPower{Caught: 12, Seeded: 13}
	buf.Reset()
	require.NoError(t, c.WriteMarkdown(&buf))
	require.True(t, strings.HasPrefix(buf.String(), "## tenantcanary: certified"))
	require.Contains(t, buf.String(), "12 of 13 seeded faults caught")
	require.Contains(t, buf.String(), "Positive controls: 1 of 1 held")
	require.Contains(t, buf.String(), "tenants default (launch), alpha, beta, t000, t001, ... (33 in all), ")
	require.NotContains(t, buf.String(), "### Leaks")
	require.NotContains(t, buf.String(), "### Skipped")
}

func TestMarkdownCapsLongListsAndEscapes(t *testing.T) {
	t.Parallel()
	r := leaking("many")
	r.Phases[1].Findings = nil
	for i := range MaxListed + 7 {
		f := leakFinding
		f.Where.Request = intp(i)
		f.Excerpt = "a `tick` and <b>"
		r.Phases[1].Findings = append(r.Phases[1].Findings, f)
	}
	c := sample(r)
	var buf bytes.Buffer
	require.NoError(t, c.WriteMarkdown(&buf))
	md := buf.String()
	require.Contains(t, md, "### Leaks (57)")
	require.Contains(t, md, "- ... and 7 more: see certificate.json\n")
	require.Equal(t, MaxListed, strings.Count(md, "- many, phase cron: "))
	require.Contains(t, md, "``"+strings.ReplaceAll(leakFinding.String(), "...cHJvdmlkZXIta2V5LWJldGE...", "a `tick` and <b>"))
}

func TestWriteTable(t *testing.T) {
	t.Parallel()
	c := sample(passing("pooled-serve"), failing("restart"))
	var buf bytes.Buffer
	require.NoError(t, c.WriteTable(&buf))
	out := buf.String()
	require.Regexp(t, `(?m)^SCENARIO\s+RESULT\s+PHASES\s+REQUESTS\s+SNAPSHOTS\s+FINDINGS\s+DURATION$`, out)
	require.Regexp(t, `(?m)^pooled-serve\s+pass\s+2\s+9\s+6\s+0\s+1\.5s$`, out)
	require.Regexp(t, `(?m)^restart\s+failed\s+1\s+6\s+3\s+0\s+1\.5s$`, out)
	require.Contains(t, out, "verdict: FAILED")
	require.Contains(t, out, "(exit 2)")
}

func TestWriteFilesAndStepSummary(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "out", "nested")
	summary := filepath.Join(t.TempDir(), "step-summary.md")
	require.NoError(t, os.WriteFile(summary, []byte("earlier step\n"), 0o644))
	env := func(k string) (string, bool) {
		if k == StepSummaryVar {
			return summary, true
		}
		return "", false
	}
	c := sample(passing("a"), leaking("b"))
	require.NoError(t, c.Write(dir, env))

	data, err := os.ReadFile(filepath.Join(dir, JSONFile))
	require.NoError(t, err)
	back, err := ReadJSON(bytes.NewReader(data))
	require.NoError(t, err)
	require.Equal(t, c, back)

	data, err = os.ReadFile(filepath.Join(dir, JUnitFile))
	require.NoError(t, err)
	var suites JUnitSuites
	require.NoError(t, xml.Unmarshal(data, &suites))
	require.Len(t, suites.Suites, 2)

	md, err := os.ReadFile(filepath.Join(dir, MarkdownFile))
	require.NoError(t, err)
	step, err := os.ReadFile(summary)
	require.NoError(t, err)
	require.Equal(t, "earlier step\n"+string(md)+"\n", string(step))

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 3, "no temporary file left behind")

	// Written again without the variable: files replaced, summary untouched.
	require.NoError(t, c.Write(dir, func(string) (string, bool) { return "", false }))
	step2, err := os.ReadFile(summary)
	require.NoError(t, err)
	require.Equal(t, step, step2)
	require.NoError(t, c.Write(dir, nil))
}

func TestWriteReportsUnwritableDir(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "a-file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	err := sample(passing("a")).Write(filepath.Join(file, "out"), nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), "write certificate")
}

func TestToolVersion(t *testing.T) {
	t.Parallel()
	v := ToolVersion()
	require.NotEmpty(t, v)
	require.True(t, strings.HasPrefix(v, "devel") || strings.HasPrefix(v, "v"), v)
}

func TestTenantsOfRosters(t *testing.T) {
	t.Parallel()
	a, b := passing("a"), passing("b")
	a.Roster = []scenarios.TenantInfo{{Name: "default", Tag: "1111111111", Launch: true}, {Name: "alpha", Tag: "2222222222"}}
	b.Roster = []scenarios.TenantInfo{{Name: "default", Tag: "3333333333", Launch: true}, {Name: "alpha", Tag: "4444444444"},
		{Name: "gamma", Tag: "5555555555"}, {Name: "alpha", Tag: "4444444444"}}
	require.Equal(t, []Tenant{
		{Name: "default", Launch: true, Tags: []string{"1111111111", "3333333333"}},
		{Name: "alpha", Tags: []string{"2222222222", "4444444444"}},
		{Name: "gamma", Tags: []string{"5555555555"}},
	}, TenantsOf([]scenarios.Report{a, skipped("c"), b}))
	require.Empty(t, TenantsOf([]scenarios.Report{skipped("c")}))
}

// TestDeclaredBehaviours: a target's declared behaviours are in the JSON
// and named in the summary; a target without any shows no such line.
func TestDeclaredBehaviours(t *testing.T) {
	t.Parallel()
	c := New(Target{Name: "hermes", Behaviours: map[string]string{"unknown_profile": "fallback_to_launch"}}, nil,
		[]scenarios.Report{passing("a")}, time.Second)
	var buf bytes.Buffer
	require.NoError(t, c.WriteMarkdown(&buf))
	require.Contains(t, buf.String(), "Declared behaviours (each judged as declared): unknown_profile: fallback_to_launch;\n")
	buf.Reset()
	require.NoError(t, c.WriteJSON(&buf))
	require.Contains(t, buf.String(), `"declared_behaviours": {`)
	buf.Reset()
	require.NoError(t, sample(passing("a")).WriteMarkdown(&buf))
	require.NotContains(t, buf.String(), "Declared behaviours")
}

// A self-test that fails names what failed: the fault missed and why, the
// clean run that was not clean and why, on the console, in summary.md and
// in certificate.json.
func TestSelfTestFailuresNameThemselves(t *testing.T) {
	t.Parallel()
	c := sample(passing("pooled-serve"))
	c.DetectionPower = &DetectionPower{Caught: 1, Seeded: 3, Faults: []FaultResult{
		{Fault: "model-bleed", Scenario: "pooled-serve", Expected: "launch_bleed", Caught: true, CleanRun: true},
		{Fault: "shared-shell", Scenario: "shell-reuse", Expected: "env_snapshot", Missed: "no env_snapshot finding (the run found nothing)", CleanRun: false, CleanWhy: "1 text finding(s), first: alpha's key in the log"},
		{Fault: "global-cwd", Scenario: "shell-reuse", Expected: "env_snapshot", Caught: true, CleanRun: false, CleanWhy: "1 text finding(s), first: alpha's key in the log"},
	}}
	c.Verdict = Failed
	fails := c.DetectionPower.Failures()
	require.Equal(t, []string{
		"fault shared-shell MISSED by shell-reuse (expected env_snapshot): no env_snapshot finding (the run found nothing)",
		"clean run of shell-reuse (faults shared-shell, global-cwd) was NOT CLEAN: 1 text finding(s), first: alpha's key in the log",
	}, fails)

	var console bytes.Buffer
	require.NoError(t, c.WriteTable(&console))
	for _, l := range fails {
		require.Contains(t, console.String(), "self-test: "+l)
	}
	var md bytes.Buffer
	require.NoError(t, c.WriteMarkdown(&md))
	require.Contains(t, md.String(), "fault shared-shell MISSED by shell-reuse")
	require.Contains(t, md.String(), "clean run of shell-reuse (faults shared-shell, global-cwd) was NOT CLEAN")
	var js bytes.Buffer
	require.NoError(t, c.WriteJSON(&js))
	require.Contains(t, js.String(), `"missed": "no env_snapshot finding (the run found nothing)"`)
	require.Contains(t, js.String(), `"clean_why": "1 text finding(s), first: alpha's key in the log"`)
}
