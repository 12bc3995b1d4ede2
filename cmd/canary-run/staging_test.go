package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/certificate"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
	"github.com/tenantcanary/tenantcanary/scenarios"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// TestStagingRecipe runs docs/staging.md's recipe step by step: the
// providers with --homes, agentd serve on those homes (this test binary is
// agentd, see TestMain), a target file naming the roster, the catalog:
// exit 0, a certificate that says it is partial, and the server leaves no
// process behind.
func TestStagingRecipe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	stage, homes := filepath.Join(dir, "stage"), filepath.Join(dir, "stage", "homes")
	names := writeFile(t, dir, "names.json", `["default", "alpha", "beta"]`)

	// 1. canary-run fakellm --listen 127.0.0.1:0 --tenants names.json --out stage --homes stage/homes
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var fOut, fErr syncio.Buffer
	fdone := make(chan int, 1)
	go func() {
		fdone <- dispatch(ctx, []string{"fakellm", "--listen", "127.0.0.1:0", "--tenants", names, "--out", stage, "--homes", homes},
			strings.NewReader(""), &fOut, &fErr, noEnv)
	}()
	defer func() {
		cancel()
		select {
		case code := <-fdone:
			assert.Equal(t, 0, code, "fakellm: %s", &fErr)
		case <-time.After(30 * time.Second):
			t.Errorf("fakellm did not stop; stderr: %s", &fErr)
		}
	}()
	require.Eventually(t, func() bool { return strings.Contains(fOut.String(), "serving 3 providers until interrupted") },
		30*time.Second, 10*time.Millisecond, "fakellm not serving; stdout: %s stderr: %s", &fOut, &fErr)
	launchHome := filepath.Join(homes, "home", ".agentd")
	require.Contains(t, fOut.String(), "homes: HOME="+filepath.Join(homes, "home"))

	// The homes hold what the controls need.
	roster, err := tenants.ReadRoster(filepath.Join(stage, stagingTenantsFile))
	require.NoError(t, err)
	for _, rt := range roster.Tenants {
		home := launchHome
		if !rt.Launch {
			home = filepath.Join(launchHome, "profiles", rt.Name)
		}
		h, err := tenants.ReadHome(home)
		require.NoError(t, err, rt.Name)
		assert.Equal(t, rt.Key, h.Env["TENANT_PROVIDER_KEY"], rt.Name)
		assert.NotEmpty(t, h.Env["API_SERVER_KEY"], rt.Name)
		assert.Equal(t, tenants.CanaryValue(tenants.EnvMarker, rt.Name, rt.Tag), h.Env["TENANT_MARKER"], rt.Name)
		assert.Equal(t, rt.BaseURL, h.Config["model"].(map[string]any)["base_url"], rt.Name)
	}

	// 2. the operator's scope: each tenant's workdirs lie in stage/work/<profile>
	managed := filepath.Join(dir, "managed")
	require.NoError(t, os.MkdirAll(managed, 0o755))
	writeFile(t, managed, "config.yaml", "terminal:\n  workdir_roots: [\""+filepath.Join(stage, "work")+"/{profile}\"]\n")
	for _, rt := range roster.Tenants {
		require.Equal(t, filepath.Join(stage, "work"), filepath.Dir(filepath.Dir(rt.Workdir)), "%s's workdir lies beneath its profile's root", rt.Name)
	}

	// 3. AGENTD_HOME=stage/homes/home/.agentd AGENTD_MANAGED_DIR=stage/managed AGENTD_SESSION_TOKEN=staging-token agentd serve --cron ...
	exe := testExe(t)
	marker := "staging-recipe-" + filepath.Base(filepath.Dir(dir)) // t.TempDir() ends in 001 in every run on the machine
	env, err := tenants.HermeticEnv(os.Environ(), filepath.Join(homes, "home"), tenants.AgentdLayout(), map[string]string{
		"AGENTD_HOME": launchHome, "AGENTD_SESSION_TOKEN": "staging-token",
		"AGENTD_MANAGED_DIR": managed, procgroup.MarkerVar: marker,
	})
	require.NoError(t, err)
	srv, err := harness.StartProc(ctx, harness.ProcSpec{Name: "agentd serve", Env: env, Dir: dir,
		Argv: []string{exe, "agentd", "serve", "--host", "127.0.0.1", "--port", "0", "--cron", "--cron-interval", "500ms"}})
	require.NoError(t, err)
	defer func() {
		require.NotEmpty(t, procgroup.Marked(marker), "positive control: the server carries the marker")
		require.NoError(t, srv.Stop(20*time.Second))
		require.Eventually(t, func() bool { return len(procgroup.Marked(marker)) == 0 }, 10*time.Second, 10*time.Millisecond,
			"processes of the staging server outlived it: %v", procgroup.Marked(marker))
	}()
	m, err := srv.WaitLine(ctx, regexp.MustCompile(harness.DefaultReadyLine))
	require.NoError(t, err)

	// 4. staging.yaml, 5. canary-run --target staging.yaml --no-self-test --out out
	target := writeFile(t, dir, "staging.yaml", "name: staging\nurl: http://"+m[1]+":"+m[2]+"\ntoken: staging-token\ntenants_file: "+
		filepath.Join(stage, stagingTenantsFile)+"\n")
	out := filepath.Join(dir, "out")
	var rOut, rErr syncio.Buffer
	// The recipe's run, narrowed to a few scenarios: a pass, a skip and
	// an authz check prove the recipe; the whole catalog on a staging
	// server runs once in the suite (scenarios.TestStagingTargetFromRoster).
	code := dispatch(ctx, []string{"--target", target, "--no-self-test", "--out", out, "--run", "^(pooled-serve|settings-writes|tenant-authz)$"},
		strings.NewReader(""), &rOut, &rErr, noEnv)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s\nserver:\n%s", &rOut, &rErr, srv.Tail())
	t.Logf("the run's result:\n%s", &rOut)
	c := readCertificate(t, out)
	require.Equal(t, certificate.Certified, c.Verdict)
	passed := 0
	for _, r := range c.Scenarios {
		if r.Result == scenarios.Pass {
			passed++
		}
	}
	require.Equal(t, 2, passed, "pooled-serve and tenant-authz pass")
	require.Len(t, c.Scenarios, 3)
	// The verdict line says what did not run.
	require.Contains(t, rOut.String(), "verdict: certified, partial: ")
	require.Contains(t, rOut.String(), " scenarios skipped")
	require.Equal(t, c.Headline(), strings.TrimPrefix(regexp.MustCompile(`(?m)^verdict: (.*) \(exit 0\)`).FindStringSubmatch(rOut.String())[1], ""))
}
