package main

import (
	"context"
	"encoding/xml"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/certificate"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
	"github.com/tenantcanary/tenantcanary/scenarios"
)

// readCertificate reads the certificate a run wrote into dir.
func readCertificate(t *testing.T, dir string) *certificate.Certificate {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, certificate.JSONFile))
	require.NoError(t, err)
	defer f.Close()
	c, err := certificate.ReadJSON(f)
	require.NoError(t, err)
	return c
}

// TestCertifyEmbeddedAgentd is the product's main command on one scenario:
// the embedded agentd (this test binary re-executed as `canary-run agentd`,
// see TestMain) is certified, and the three files say so.
func TestCertifyEmbeddedAgentd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out := filepath.Join(dir, "cert")
	summary := filepath.Join(dir, "step-summary.md")
	env := func(k string) (string, bool) {
		if k == certificate.StepSummaryVar {
			return summary, true
		}
		return "", false
	}
	var stdout, stderr syncio.Buffer
	code := dispatch(t.Context(), []string{"--run", "^stdio-separate$", "--tenants", "2", "--out", out, "--keep", "--no-self-test"},
		strings.NewReader(""), &stdout, &stderr, env)
	require.Equal(t, 0, code, "stderr:\n%s", &stderr)
	require.Empty(t, embeddedAgentds(t, filepath.Join(out, "work")), "no agentd outlives the run")
	require.FileExists(t, filepath.Join(out, "work", "stdio-separate", harness.KeptLog), "--keep keeps the run's own log")

	// Progress as it goes on stderr, then the result on stdout: the final
	// table, the verdict and where the certificate is.
	errOut, result := stderr.String(), stdout.String()
	require.Contains(t, errOut, "stdio-separate")
	require.Regexp(t, `(?m)^SCENARIO\s+RESULT\s+PHASES`, result)
	require.Regexp(t, `(?m)^stdio-separate\s+pass\s+\d+\s+[1-9]\d*\s+[1-9]\d*\s+0\s`, result)
	require.Contains(t, result, "verdict: certified")
	require.Contains(t, result, "certificate: "+filepath.Join(out, certificate.JSONFile))
	require.NotContains(t, errOut, "verdict:", "the result is not mixed into the progress")
	require.NotContains(t, result, "phase ", "the progress is not mixed into the result")

	c := readCertificate(t, out)
	require.Equal(t, certificate.Certified, c.Verdict)
	require.Equal(t, "agentd", c.Target.Name)
	require.NotEmpty(t, c.Target.Version)
	require.Len(t, c.Scenarios, 1)
	r := c.Scenarios[0]
	require.Len(t, r.Roster, 2)
	require.Equal(t, []certificate.Tenant{
		{Name: "default", Launch: true, Tags: []string{r.Roster[0].Tag}},
		{Name: "alpha", Tags: []string{r.Roster[1].Tag}},
	}, c.Tenants)
	require.Regexp(t, `^[0-9a-f]{10}$`, r.Roster[0].Tag)
	require.Equal(t, "stdio-separate", r.ID)
	require.Equal(t, scenarios.Pass, r.Result)
	require.NotEmpty(t, r.Phases)
	require.Positive(t, r.Totals().Requests)
	require.Positive(t, r.Totals().Snapshots)
	require.Nil(t, c.DetectionPower)

	data, err := os.ReadFile(filepath.Join(out, certificate.JUnitFile))
	require.NoError(t, err)
	var suites certificate.JUnitSuites
	require.NoError(t, xml.Unmarshal(data, &suites))
	require.Len(t, suites.Suites, 1)
	require.Equal(t, len(r.Phases), suites.Tests)
	require.Zero(t, suites.Failures+suites.Errors)

	md, err := os.ReadFile(filepath.Join(out, certificate.MarkdownFile))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(md), "## tenantcanary: certified"), string(md))
	step, err := os.ReadFile(summary)
	require.NoError(t, err)
	require.Equal(t, string(md)+"\n", string(step))

	// --keep left the work tree for a look.
	entries, err := os.ReadDir(filepath.Join(out, "work", "stdio-separate"))
	require.NoError(t, err)
	require.NotEmpty(t, entries)
}

// TestCertifyInterrupted cancels a run mid-scenario (canary-run's SIGINT):
// it ends, the certificate says failed and why, the exit code is 2.
func TestCertifyInterrupted(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "cert")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr syncio.Buffer
	done := make(chan int, 1)
	go func() {
		done <- dispatch(ctx, []string{"--run", "^restart-resume$", "--tenants", "2", "--out", out, "--keep", "--no-self-test"},
			strings.NewReader(""), &stdout, &stderr, noEnv)
	}()
	// Positive control for the survivor check below: it sees the run's
	// agentd while it lives.
	work := filepath.Join(out, "work")
	require.Eventually(t, func() bool { return len(embeddedAgentds(t, work)) > 0 },
		30*time.Second, 10*time.Millisecond, "no agentd of the run seen; stderr:\n%s", &stderr)
	cancel()
	select {
	case code := <-done:
		require.Equal(t, 2, code, "stderr:\n%s", &stderr)
	case <-time.After(60 * time.Second):
		t.Fatalf("the run did not end after its context did; stderr:\n%s", &stderr)
	}
	require.Empty(t, embeddedAgentds(t, work), "an interrupted run leaves no agentd behind")
	c := readCertificate(t, out)
	require.Equal(t, certificate.Failed, c.Verdict)
	require.Contains(t, c.Error, "interrupted")
	require.Contains(t, stdout.String(), "run failed: interrupted")
}

// TestSelfTestCommand is `canary-run --self-test`: the seeded faults of the
// embedded agentd caught by their expected invariant, the same scenarios
// clean, the detection power in the certificate, exit 0. It seeds three
// faults of three scenarios: the whole matrix runs once in the suite, in
// scenarios.TestSelfTestCatchesEverySeededFault; this is the command's
// plumbing around it.
func TestSelfTestCommand(t *testing.T) {
	var subset []scenarios.Fault
	for _, f := range scenarios.Faults() {
		if f.Name == "shared-shell" || f.Name == "model-bleed" || f.Name == "sequential-sessions" {
			subset = append(subset, f)
		}
	}
	require.Len(t, subset, 3)
	seededFaults = func() []scenarios.Fault { return subset } // before t.Parallel: no test reads it yet
	t.Parallel()
	out := filepath.Join(t.TempDir(), "cert")
	var stdout, stderr syncio.Buffer
	code := dispatch(t.Context(), []string{"--self-test", "--parallel", "2", "--out", out}, strings.NewReader(""), &stdout, &stderr, noEnv)
	require.Equal(t, 0, code, "stderr:\n%s", &stderr)
	require.Regexp(t, `(?m)^FAULT\s+SCENARIO\s+EXPECTED\s+RESULT`, stdout.String())
	require.Regexp(t, `(?m)^shared-shell\s+shell-reuse\s+env_snapshot\s+caught\s+[1-9]`, stdout.String())
	c := readCertificate(t, out)
	require.Equal(t, certificate.Certified, c.Verdict)
	require.NotNil(t, c.DetectionPower)
	require.Equal(t, len(subset), c.DetectionPower.Seeded)
	require.Equal(t, c.DetectionPower.Seeded, c.DetectionPower.Caught)
	for _, f := range c.DetectionPower.Faults {
		require.True(t, f.Caught && f.CleanRun, "%+v", f)
	}

	// A certification of the embedded agentd with the self-test's tenants
	// takes its catalog's runs as the self-test's clean runs: shell-reuse
	// runs clean once, the scenarios the catalog did not run are run clean
	// by the self-test, and the stages are timed.
	out = filepath.Join(t.TempDir(), "cert")
	stdout, stderr = syncio.Buffer{}, syncio.Buffer{}
	code = dispatch(t.Context(), []string{"--run", "^shell-reuse$", "--out", out}, strings.NewReader(""), &stdout, &stderr, noEnv)
	require.Equal(t, 0, code, "stderr:\n%s", &stderr)
	cleanRuns := func(id string) int {
		return len(regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d `+id+`\s+pass in `).FindAllString(stderr.String(), -1))
	}
	require.Equal(t, 1, cleanRuns("shell-reuse"), "the catalog's run serves as the clean run:\n%s", &stderr)
	require.Equal(t, 1, cleanRuns("pooled-serve"), "a scenario the catalog did not run is run clean once:\n%s", &stderr)
	require.Regexp(t, `canary-run: stages: preflight [0-9.]+s, catalog [0-9.]+s, self-test [0-9.]+s`, stderr.String())
	c = readCertificate(t, out)
	require.Equal(t, certificate.Certified, c.Verdict)
	require.Equal(t, c.DetectionPower.Seeded, c.DetectionPower.Caught)
}

// TestEmbeddedAgentdRunsItsPlugins: the embedded agentd's plugin hosts
// are this binary run again, the model-provider extraction's credential-
// free child included (it once lost the variable that re-executes the
// binary as agentd, and exited with the usage error).
func TestEmbeddedAgentdRunsItsPlugins(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "cert")
	var stdout, stderr syncio.Buffer
	code := dispatch(t.Context(), []string{"--run", "^(plugin-surfaces|plugin-hosts)$", "--out", out, "--no-self-test"},
		strings.NewReader(""), &stdout, &stderr, func(string) (string, bool) { return "", false })
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", &stdout, &stderr)
	c := readCertificate(t, out)
	require.Len(t, c.Scenarios, 2)
	for _, r := range c.Scenarios {
		require.Equal(t, scenarios.Pass, r.Result, "%s: %s", r.ID, r.Reason)
	}
}
