package scenarios

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
	"github.com/tenantcanary/tenantcanary/invariants"
)

// stagingSSHAll runs the whole catalog in TestStagingOverSSH, not its
// representative subset.
const stagingSSHAll = "TENANTCANARY_STAGING_SSH_ALL"

// stagingSSHRun, when set, is the regexp of the scenarios
// TestStagingOverSSH runs (as canary-run's --run), in place of its subset
// or the whole catalog: to run one family over ssh by hand.
const stagingSSHRun = "TENANTCANARY_STAGING_SSH_RUN"

// stagingSSHSubset are the scenarios TestStagingOverSSH runs by default:
// a pooled run whose files are pulled and scanned, scoped writes, a
// restart. hostile-tools, whose escapes are read from the process listing
// over ssh, runs with the whole catalog (TENANTCANARY_STAGING_SSH_ALL=1):
// beside the whole suite under the race detector its listings over ssh
// outlasted their deadline (a CI rehearsal's failure, 9 minutes in).
// stdio-separate's backends run on the host through the target file's
// stdio command (ssh).
var stagingSSHSubset = []string{"pooled-serve", "settings-writes", "restart-resume", "stdio-separate"}

// A staging agentd reached only over its port and ssh: the catalog plants,
// reads and scans its homes, restarts it and lists its processes through
// the target file's remote: commands, and certifies it.
func TestStagingOverSSH(t *testing.T) {
	t.Parallel()
	st := startSSHStage(t)
	tg, err := harness.LoadTarget(st.target)
	require.NoError(t, err)
	// The harness cannot see the server's homes: they are on the
	// namespace's tmpfs.
	ents, err := os.ReadDir(st.server)
	require.NoError(t, err)
	require.Empty(t, ents, "the server's folder is empty from outside its namespace")

	ids := stagingSSHSubset
	if os.Getenv(stagingSSHAll) != "" {
		ids = nil
		for _, s := range Default().All() {
			if s.ID != "noisy-neighbour" { // its verdict needs a quiet machine (TestCatalogAgainstAgentd)
				ids = append(ids, s.ID)
			}
		}
	}
	for i := range ids {
		ids[i] = regexp.QuoteMeta(ids[i])
	}
	run := "^(" + strings.Join(ids, "|") + ")$"
	if r := os.Getenv(stagingSSHRun); r != "" {
		run = r
	}
	start := time.Now()
	var progress syncio.Buffer
	reps, err := RunCatalog(t.Context(), Default(), Config{Target: tg, WorkDir: t.TempDir(), Run: run, Progress: &progress})
	require.NoError(t, err)
	t.Logf("progress:\n%s", progress.String())
	st.noRunProcessesLeft(t)
	for _, r := range reps {
		for _, sk := range r.Skipped {
			t.Logf("%s: check %s not made: %s", r.ID, sk.Invariant, sk.Reason)
		}
	}
	var ran, skipped, remoteOnly []string
	local := agentdTarget()
	for _, r := range reps {
		switch r.Result {
		case Skipped:
			skipped = append(skipped, r.ID+": "+r.Reason)
			if spec, err := Default().Get(r.ID); err == nil && spec.unmet(local) == "" {
				remoteOnly = append(remoteOnly, r.ID+": "+r.Reason)
			}
		case Pass:
			ran = append(ran, r.ID)
			for _, sk := range r.Skipped {
				assert.NotEmpty(t, sk.Reason, "%s: skipped check %s", r.ID, sk.Invariant)
			}
		default:
			t.Errorf("%s: %s: %s\n%s", r.ID, r.Result, r.Reason, strings.Join(r.Log, "\n"))
		}
	}
	t.Logf("over ssh in %v: %d passed, %d skipped:\n%s", time.Since(start).Round(time.Second), len(ran), len(skipped), strings.Join(skipped, "\n"))
	if os.Getenv(stagingSSHAll) == "" && os.Getenv(stagingSSHRun) == "" {
		assert.Empty(t, skipped, "the subset's scenarios all run over ssh")
	}
	// Issue 48: against the whole catalog, at most two scenarios that the
	// embedded agentd runs on the harness's own machine are skipped for
	// the server being remote (a scenario agentd's own shape skips
	// everywhere, such as a gateway scenario needing a provisioner, is no
	// cost of the remote path).
	t.Logf("skipped over ssh only: %d\n%s", len(remoteOnly), strings.Join(remoteOnly, "\n"))
	if os.Getenv(stagingSSHAll) != "" && os.Getenv(stagingSSHRun) == "" {
		assert.LessOrEqual(t, len(remoteOnly), 2, "scenarios the embedded agentd runs but the ssh staging run skips:\n%s", strings.Join(remoteOnly, "\n"))
	}
	// The whole catalog skips the scenarios that need a stdio backend, a
	// gateway, replicas, stores or the server on this machine, each with
	// its reason (docs/staging.md lists them).
	for _, s := range skipped {
		assert.Contains(t, s, ": needs ", "a skip says what it needs")
	}

	// The gateway family runs against agentd's gateway on the staging
	// host: gateway-tenants restarted it through remote.stop and
	// remote.start, and colliding-inputs made its gateway chats.
	for _, r := range reps {
		if r.Result == Skipped || (r.ID != "gateway-tenants" && r.ID != "colliding-inputs") {
			continue
		}
		for _, sk := range r.Skipped {
			assert.NotEqual(t, "restart", sk.Invariant, "%s: the gateway was restarted over ssh: %s", r.ID, sk.Reason)
			assert.NotContains(t, sk.Reason, "gateway chats not tried", r.ID)
		}
	}

	// The files were read through ssh: pooled-serve's file check ran and
	// counted the server's files.
	for _, r := range reps {
		if r.ID != "pooled-serve" {
			continue
		}
		last := r.Phases[len(r.Phases)-1]
		assert.Positive(t, last.Counts.Files, "pooled-serve scanned the server's files, pulled over ssh")
		for _, sk := range r.Skipped {
			assert.NotEqual(t, "file", sk.Invariant, "the file check ran: %s", sk.Reason)
		}
	}
}

// The seeded faults that act through the server's files and its
// processes are caught through ssh: a database shared by every profile
// (the file check on the homes pulled over ssh), a write addressed to
// one profile landing in the launch profile's files (the write-scope
// check, its snapshots pulled over ssh), a tool's output copied into the
// server's TMPDIR (the shared-place check, on remote.shared pulled over
// ssh), and, with the whole catalog
// (TENANTCANARY_STAGING_SSH_ALL), a process that outlives its session
// (the escape check, on the listing remote.processes prints). One that
// acts through the staging host's gateway (gateway_url) is caught too:
// a gateway serving another profile's model (and, with the whole
// catalog, one failing a turn over onto another profile's provider).
func TestStagingOverSSHCatchesSeededFaults(t *testing.T) {
	t.Parallel()
	st := startSSHStage(t)
	tg, err := harness.LoadTarget(st.target)
	require.NoError(t, err)
	faults := []Fault{}
	for _, f := range Faults() {
		switch f.Name {
		case "shared-state-db", "wrong-write-scope", "tmp-copy":
			faults = append(faults, f)
		case "escaped-process":
			if os.Getenv(stagingSSHAll) != "" {
				faults = append(faults, f)
			}
		}
	}
	require.NotEmpty(t, faults)
	// The gateway's faults: their findings name a route of the gateway,
	// not a file.
	gwFaults := map[string]bool{}
	for _, f := range Faults() {
		switch f.Name {
		case "gateway-any-model":
			faults = append(faults, f)
			gwFaults[f.Name] = true
		case "gateway-failover-foreign":
			if os.Getenv(stagingSSHAll) != "" {
				faults = append(faults, f)
				gwFaults[f.Name] = true
			}
		}
	}
	require.NotEmpty(t, gwFaults)
	for _, f := range faults {
		st.seedFault(t, f.Name)
		reps, err := RunCatalog(t.Context(), Default(), Config{Target: tg, WorkDir: t.TempDir(), Run: "^" + regexp.QuoteMeta(f.Scenario) + "$"})
		require.NoError(t, err)
		require.Len(t, reps, 1)
		assert.True(t, found(&reps[0], f.Expect), "%s: %s over ssh found no %s finding: %s\n%s", f.Name, f.Scenario, f.Expect, reps[0].Result, strings.Join(reps[0].Log, "\n"))
		for _, fd := range reps[0].Findings() {
			switch {
			case fd.Invariant != f.Expect || fd.Where.Path == "":
			case gwFaults[f.Name]:
				assert.Contains(t, fd.Where.Label, "gateway", "%s: the finding names the gateway's route: %+v", f.Name, fd.Where)
			default:
				onHost := strings.HasPrefix(fd.Where.Path, tg.Reach.Home+"/")
				for _, sh := range tg.Reach.Shared {
					onHost = onHost || strings.HasPrefix(fd.Where.Path, sh+"/")
				}
				assert.True(t, onHost, "%s: the finding names the server's path: %s", f.Name, fd.Where.Path)
			}
		}
	}

	// Through the stdio backend over ssh: agentd's stdio process takes the
	// fault from the operator's control script. A named profile's session
	// it serves reports the launch profile's model (stdio-separate); it
	// runs another profile's plugin in its own process, which the listing
	// of the server's host shows (entry-points).
	stdio := map[string]string{"model-bleed": "stdio-separate", "launch-mode-isolation": "entry-points"}
	for _, f := range Faults() {
		scenario := stdio[f.Name]
		if scenario == "" {
			continue
		}
		delete(stdio, f.Name)
		st.seedFault(t, f.Name)
		reps, err := RunCatalog(t.Context(), Default(), Config{Target: tg, WorkDir: t.TempDir(), Run: "^" + scenario + "$"})
		require.NoError(t, err)
		require.Len(t, reps, 1)
		assert.True(t, found(&reps[0], f.Expect), "%s: %s over ssh found no %s finding: %s\n%s", f.Name, scenario, f.Expect, reps[0].Result, strings.Join(reps[0].Log, "\n"))
		if scenario == "entry-points" {
			// Not only its reads: the plugin's process is the stdio
			// command's own on the server's host.
			assert.True(t, slices.ContainsFunc(reps[0].Findings(), func(fd invariants.Finding) bool {
				return strings.Contains(fd.Detail, "in the command's own process")
			}), "%s: no finding names the command's own process:\n%s", f.Name, strings.Join(reps[0].Log, "\n"))
		}
		st.noRunProcessesLeft(t)
	}
	assert.Empty(t, stdio, "faults the stdio entries name and Faults() lacks")
	st.seedFault(t, "")
}

// target check walks a running server's stdio command as it walks its
// websocket: a backend, a session and a turn per tenant, here over ssh.
func TestTargetCheckOverSSHWalksStdio(t *testing.T) {
	t.Parallel()
	st := startSSHStage(t)
	tg, err := harness.LoadTarget(st.target)
	require.NoError(t, err)
	var out syncio.Buffer
	err = harness.DryPass(t.Context(), tg, t.TempDir(), &out, 2*time.Minute)
	require.NoError(t, err, "%s", out.String())
	_, stdio, ok := strings.Cut(out.String(), "----  stdio")
	require.True(t, ok, "no stdio walk:\n%s", out.String())
	assert.Contains(t, stdio, "stdio backends, each ready", "%s", out.String())
	assert.Equal(t, 2, strings.Count(stdio, "ok    turn "), "a turn per tenant over the stdio command:\n%s", out.String())
	st.noRunProcessesLeft(t)
}
