package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/certificate"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
	"github.com/tenantcanary/tenantcanary/scenarios"
)

// TestATargetThatCannotStartStopsTheRun: every backend of the target exits
// at once with a start-up error. The first scenario that needs one fails
// with that error; the catalog stops there (the others are reported not
// run, each naming why) instead of waiting out each start in turn; exit 2.
func TestATargetThatCannotStartStopsTheRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	exe, err := os.Executable()
	require.NoError(t, err)
	broken := `[sh, -c, 'echo "fatal: config.yaml: no such listener" >&2; exit 3']`
	target := filepath.Join(dir, "broken.yaml")
	require.NoError(t, os.WriteFile(target, []byte(strings.Join([]string{
		"name: broken",
		"stdio: " + broken,
		"serve: " + broken,
		"gateway: " + broken,
		"profile_root: [" + exe + ", agentd, profile, root]",
		"cron_tick: [" + exe + ", agentd, cron, tick]",
		"token_var: AGENTD_SESSION_TOKEN",
		"files: true",
		"",
	}, "\n")), 0o644))
	out := filepath.Join(dir, "out")
	var stdout, stderr syncio.Buffer
	code := dispatch(t.Context(), []string{"--target", target, "--no-self-test", "--out", out}, strings.NewReader(""), &stdout, &stderr, noEnv)
	require.Equal(t, 2, code, "stdout:\n%s\nstderr:\n%s", &stdout, &stderr)
	c := readCertificate(t, out)
	require.Equal(t, certificate.Failed, c.Verdict)
	ran, notRun := 0, 0
	for _, r := range c.Scenarios {
		switch {
		case r.Result == scenarios.Failed && strings.HasPrefix(r.Reason, "not run: the target could not start"):
			notRun++
			require.Contains(t, r.Reason, "no such listener", "the reason quotes the target's own error")
		case r.Result == scenarios.Failed:
			ran++
		}
	}
	require.Equal(t, 1, ran, "one scenario tried the target; stdout:\n%s", &stdout)
	require.Equal(t, len(c.Scenarios)-1, notRun, "the rest did not wait for it; stdout:\n%s", &stdout)
}
