package scenarios

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

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// A staging run: the server runs somewhere the harness did not start it
// and whose files it cannot read; the providers run in another process
// (here: providers journaling to a file, as `canary-run fakellm` does) and
// the run reads their journal. What can be checked passes; what cannot is
// skipped with its reason, never passed.
func TestStagingTargetFromRoster(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	journal := filepath.Join(dir, "journal.jsonl")
	jf, err := os.Create(journal)
	require.NoError(t, err)
	defer jf.Close()
	// The operator's side: providers, homes provisioned from them, a server.
	stage, err := tenants.Build(filepath.Join(dir, "staging"), tenants.Options{Names: tenants.Names(3), Journal: &syncio.Writer{W: jf}})
	require.NoError(t, err)
	defer stage.Close()
	require.NoError(t, stage.WriteHomes(tenants.HomeExtras{}))
	roster := filepath.Join(dir, "tenants.json")
	require.NoError(t, tenants.WriteRoster(roster, stage.Roster(journal)))

	// The operator's scope declares where each tenant's workdirs lie.
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "managed"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "managed", "config.yaml"),
		[]byte("terminal:\n  workdir_roots: [\""+stage.WorkRoot()+"/{profile}\"]\n"), 0o644))

	marker := "staging-" + filepath.Base(filepath.Dir(dir)) // t.TempDir() ends in 001 in every run on the machine
	env, err := stage.Env(map[string]string{"AGENTD_SESSION_TOKEN": "staging-token", "AGENTD_MANAGED_DIR": filepath.Join(dir, "managed"),
		procgroup.MarkerVar: marker})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := harness.StartProc(ctx, harness.ProcSpec{Name: "staging serve", Env: env, Dir: stage.Home,
		Argv: []string{agentdBin, "serve", "--host", "127.0.0.1", "--port", "0", "--cron", "--cron-interval", "500ms"}})
	require.NoError(t, err)
	defer srv.Kill()
	defer func() {
		// The staging server is the test's own child: stopped, nothing it
		// started (shells) may outlive it.
		require.NotEmpty(t, procgroup.Marked(marker), "positive control: the server and its shells carry the marker")
		require.NoError(t, srv.Stop(20*time.Second))
		require.Eventually(t, func() bool { return len(procgroup.Marked(marker)) == 0 }, 30*time.Second, 10*time.Millisecond,
			"processes of the staging server outlived it: %v", procgroup.Marked(marker))
	}()
	m, err := srv.WaitLine(ctx, regexp.MustCompile(harness.DefaultReadyLine))
	require.NoError(t, err)

	target := harness.Target{Name: "staging", URL: "http://" + m[1] + ":" + m[2], Token: "staging-token", TenantsFile: roster}
	require.NoError(t, target.Validate())
	runCtx, runCancel := context.WithTimeout(ctx, 10*time.Minute)
	defer runCancel()
	// Every scenario but noisy-neighbour: its verdict needs a machine
	// quiet enough for its control, which a suite running beside it is
	// not; it runs alone in TestCatalogAgainstAgentd and the self-test.
	var ids []string
	for _, s := range Default().All() {
		if s.ID != "noisy-neighbour" {
			ids = append(ids, regexp.QuoteMeta(s.ID))
		}
	}
	reps, err := RunCatalog(runCtx, Default(), Config{Target: target, WorkDir: t.TempDir(), Run: "^(" + strings.Join(ids, "|") + ")$"})
	require.NoError(t, err)
	results := map[string]Result{}
	for _, r := range reps {
		results[r.ID] = r.Result
		switch r.Result {
		case Skipped:
			assert.NotEmpty(t, r.Reason, r.ID)
		case Pass:
			// Files were not checked, and the report says so.
			require.NotEmpty(t, r.Skipped, r.ID)
			assert.Equal(t, string(Files), r.Skipped[0].Invariant)
			assert.Contains(t, r.Skipped[0].Reason, "not reachable")
			last := r.Phases[len(r.Phases)-1]
			assert.Positive(t, last.Counts.Snapshots, "%s read its snapshots from the journal", r.ID)
			for _, c := range last.Controls {
				assert.True(t, c.Passed, "%s: %+v", r.ID, c)
			}
		default:
			t.Errorf("%s: %s: %s\n%v", r.ID, r.Result, r.Reason, r.Log)
		}
	}
	assert.Equal(t, map[string]Result{
		"stdio-separate": Skipped, "pooled-serve": Pass, "concurrent-turns": Pass, "settings-writes": Skipped,
		"profile-lifecycle": Skipped, "restart-resume": Skipped, "gateway": Skipped, "shell-reuse": Pass,
		"plugin-hosts": Skipped, "plugin-surfaces": Skipped, "tenant-authz": Pass, "profile-recreate": Skipped,
		"hostile-tools": Skipped, "hostile-plugin": Skipped,
		"gateway-tenants": Skipped, "gateway-failover": Skipped, "gateway-routes": Skipped,
		"gateway-offboarding": Skipped, "gateway-fetch": Skipped, "gateway-collide": Skipped, "gateway-replicas": Skipped,
		"colliding-inputs": Pass, "hostile-chains": Skipped, "hostile-restarts": Skipped,
		"surface": Skipped, "credential-revocation": Skipped, "entry-points": Skipped,
		"fair-share": Skipped, "cancellations": Skipped, "replicas": Skipped,
	}, results)
}
