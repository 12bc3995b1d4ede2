package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/certificate"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
	"github.com/tenantcanary/tenantcanary/scenarios"
)

// TestATargetThatCannotStartStopsTheRun: every backend of the target exits
// at once with a start-up error. The first scenario that needs each one
// fails with that error; the scenarios after it that need it are reported
// not run, each naming why, instead of waiting out each start in turn;
// exit 2, and the verdict line says the target never became ready.
func TestATargetThatCannotStartStopsTheRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	exe := testExe(t)
	broken := `[sh, -c, 'echo "fatal: config.yaml: no such listener" >&2; exit 3']`
	target := writeFile(t, dir, "broken.yaml", strings.Join([]string{
		"name: broken",
		"stdio: " + broken,
		"serve: " + broken,
		"gateway: " + broken,
		"profile_root: [" + exe + ", agentd, profile, root]",
		"cron_tick: [" + exe + ", agentd, cron, tick]",
		"token_var: AGENTD_SESSION_TOKEN",
		"files: true",
		"",
	}, "\n"))
	out := filepath.Join(dir, "out")
	var stdout, stderr syncio.Buffer
	code := dispatch(t.Context(), []string{"--target", target, "--no-self-test", "--out", out}, strings.NewReader(""), &stdout, &stderr, noEnv)
	require.Equal(t, 2, code, "stdout:\n%s\nstderr:\n%s", &stdout, &stderr)
	c := readCertificate(t, out)
	require.Equal(t, certificate.Failed, c.Verdict)
	ran, notRun, skipped := 0, 0, 0
	for _, r := range c.Scenarios {
		switch {
		case r.Result == scenarios.Failed && strings.HasPrefix(r.Reason, "not run: the "):
			notRun++
			require.Contains(t, r.Reason, "backend could not start")
			require.Contains(t, r.Reason, "no such listener", "the reason quotes the target's own error")
			require.Equal(t, strings.TrimPrefix(r.Reason, "not run: "), r.NotRun)
		case r.Result == scenarios.Failed:
			ran++
		case r.Result == scenarios.Skipped:
			// Scenarios this target cannot serve at all (the gateway family
			// wants an llm_gateway block) are skipped up front, with why.
			skipped++
			require.NotEmpty(t, r.Reason)
		}
	}
	// The scenarios already running beside the first of each backend
	// (--parallel, by default scenarios.AutoParallel) tried it too; none
	// started after.
	require.GreaterOrEqual(t, ran, 1, "a scenario tried the target; stdout:\n%s", &stdout)
	require.LessOrEqual(t, ran, 3*scenarios.AutoParallel(), "only the scenarios already running tried each backend; stdout:\n%s", &stdout)
	line := "FAILED: the target never became ready (the "
	require.Contains(t, stdout.String(), "verdict: "+line, "the console's verdict line")
	summary, err := os.ReadFile(filepath.Join(out, "summary.md"))
	require.NoError(t, err)
	require.Contains(t, string(summary), line)
	raw, err := os.ReadFile(filepath.Join(out, "certificate.json"))
	require.NoError(t, err)
	require.Contains(t, string(raw), `"verdict_line": "`+line)
	require.Equal(t, len(c.Scenarios)-ran-skipped, notRun, "the rest did not wait for it; stdout:\n%s", &stdout)
	require.Greater(t, notRun, 10, "most of the catalog needs this target")
}

// TestABackendThatCannotStartCostsOnlyItsScenarios: the target's gateway
// exits at once with a start-up error while its stdio and serve backends
// work. The gateway's scenario is not run, with the gateway's own error;
// the others run and pass; the run fails (exit 2) and its verdict line,
// in the console, summary.md and certificate.json, counts what did not
// run and why.
func TestABackendThatCannotStartCostsOnlyItsScenarios(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	exe := testExe(t)
	target := writeFile(t, dir, "half.yaml", strings.Join([]string{
		"name: half-broken",
		"stdio: [" + exe + ", agentd, tui]",
		"serve: [" + exe + ", agentd, serve, --host, '{host}', --port, '0', --cron, --cron-interval, '{cron_interval}']",
		`gateway: [sh, -c, 'echo "fatal: gateway: no such listener" >&2; exit 78']`,
		"profile_root: [" + exe + ", agentd, profile, root]",
		"token_var: AGENTD_SESSION_TOKEN",
		"files: true",
		"env: {AGENTD_MANAGED_DIR: '{root}/managed'}",
		"managed_dir: '{root}/managed'",
		"managed: {terminal: {workdir_roots: ['{root}/work/{profile}']}}",
		"llm_gateway: {access: {key: '{api_server_key}', base_path: '/p/{tenant}/v1', launch_base_path: /v1}}",
		"",
	}, "\n"))
	out := filepath.Join(dir, "out")
	var stdout, stderr syncio.Buffer
	code := dispatch(t.Context(), []string{"--target", target, "--no-self-test", "--run", "^(gateway|pooled-serve|stdio-separate)$", "--out", out},
		strings.NewReader(""), &stdout, &stderr, noEnv)
	require.Equal(t, 2, code, "stdout:\n%s\nstderr:\n%s", &stdout, &stderr)
	c := readCertificate(t, out)
	require.Equal(t, certificate.Failed, c.Verdict)
	for _, r := range c.Scenarios {
		if r.ID == "gateway" {
			require.Contains(t, r.NotRun, "the gateway backend could not start")
			require.Contains(t, r.NotRun, "no such listener")
			continue
		}
		require.Equal(t, scenarios.Pass, r.Result, "%s: %v", r.ID, r.Log)
		require.Empty(t, r.NotRun)
	}
	line := "FAILED: the harness or the target failed; nothing is certified; 1 of 3 scenarios not run: the gateway backend could not start"
	require.Contains(t, stdout.String(), "verdict: "+line, "stdout:\n%s", &stdout)
	summary, err := os.ReadFile(filepath.Join(out, "summary.md"))
	require.NoError(t, err)
	require.Contains(t, string(summary), line)
	raw, err := os.ReadFile(filepath.Join(out, "certificate.json"))
	require.NoError(t, err)
	require.Contains(t, string(raw), `"verdict_line": "`+line)
}

// TestNoSandboxHereStopsTheRun: the embedded agentd's preflight (`agentd
// sandbox check`) fails when the tool sandbox the operator pinned cannot
// run on this machine (here: bwrap pinned, no bubblewrap on PATH). The run
// says so and exits 2 before any scenario: no certificate can be earned
// without the defence the hostile scenarios test. The same target with
// `none` pinned by the operator passes the preflight (its hostile
// scenarios then fail honestly, which TestWeakenedTarget covers).
func TestNoSandboxHereStopsTheRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	exe := testExe(t)
	agentd := harness.AgentdTarget(exe, "agentd")
	require.Equal(t, []string{exe, "agentd", "sandbox", "check"}, agentd.Preflight, "the embedded target checks its sandbox first")
	// env is the target's environment on top of the hermetic one: the
	// bwrap run gets a PATH with no bwrap on it.
	write := func(pin, env string) string {
		return writeFile(t, dir, pin+".yaml", strings.Join([]string{
			"name: agentd-pinned-" + pin,
			"stdio: [" + exe + ", agentd, tui]",
			"profile_root: [" + exe + ", agentd, profile, root]",
			"preflight: [" + exe + ", agentd, sandbox, check]",
			"files: true",
			"env: {AGENTD_MANAGED_DIR: '{root}/managed'" + env + "}",
			"managed_dir: '{root}/managed'",
			"managed: {terminal: {sandbox: " + pin + "}}",
			"",
		}, "\n"))
	}
	out := filepath.Join(dir, "out")
	var stdout, stderr syncio.Buffer
	code := dispatch(t.Context(), []string{"--target", write("bwrap", ", PATH: '"+dir+"'"), "--no-self-test", "--run", "^stdio-separate$", "--out", out},
		strings.NewReader(""), &stdout, &stderr, noEnv)
	require.Equal(t, 2, code, "stdout:\n%s\nstderr:\n%s", &stdout, &stderr)
	c := readCertificate(t, out)
	require.Equal(t, certificate.Failed, c.Verdict)
	require.Empty(t, c.Scenarios, "no scenario ran")
	summary, err := os.ReadFile(filepath.Join(out, "summary.md"))
	require.NoError(t, err)
	for _, want := range []string{"cannot be certified here", "terminal.sandbox is bwrap (pinned by the operator", "bubblewrap is not installed"} {
		require.Contains(t, string(summary), want)
	}

	var stdout2, stderr2 syncio.Buffer
	code = dispatch(t.Context(), []string{"--target", write("none", ""), "--no-self-test", "--run", "^stdio-separate$", "--out", filepath.Join(dir, "out-none")},
		strings.NewReader(""), &stdout2, &stderr2, noEnv)
	require.Contains(t, stderr2.String(), "preflight of agentd-pinned-none passed", "stdout:\n%s\nstderr:\n%s", &stdout2, &stderr2)
	require.Contains(t, stderr2.String(), "as the operator allowed")
	require.Equal(t, 0, code, "stdio-separate needs no sandbox; stdout:\n%s\nstderr:\n%s", &stdout2, &stderr2)
}
