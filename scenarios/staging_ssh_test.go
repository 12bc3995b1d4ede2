package scenarios

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
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
// restart, and hostile-tools, whose escapes are read from the process
// listing over ssh (one grep of /proc per listing: 1m17s alone on a
// loaded machine, where a shell loop forking base64 per process took
// 3m37s and, beside the race-detected suite, outlasted its deadline).
var stagingSSHSubset = []string{"pooled-serve", "settings-writes", "restart-resume", "hostile-tools"}

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
	for _, r := range reps {
		for _, sk := range r.Skipped {
			t.Logf("%s: check %s not made: %s", r.ID, sk.Invariant, sk.Reason)
		}
	}
	var ran, skipped []string
	for _, r := range reps {
		switch r.Result {
		case Skipped:
			skipped = append(skipped, r.ID+": "+r.Reason)
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
	// The whole catalog skips the scenarios that need a stdio backend, a
	// gateway, replicas, stores or the server on this machine, each with
	// its reason (docs/staging.md lists them).
	for _, s := range skipped {
		assert.Contains(t, s, ": needs ", "a skip says what it needs")
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

// stagingSSHFaults, when set, is the regexp of the seeded faults
// TestStagingOverSSHCatchesSeededFaults seeds (of its fast and slow ones),
// in place of its default.
const stagingSSHFaults = "TENANTCANARY_STAGING_SSH_FAULTS"

// The seeded faults TestStagingOverSSHCatchesSeededFaults seeds by
// default (fast), and with TENANTCANARY_STAGING_SSH_ALL (slow: their
// scenarios take minutes over ssh).
var (
	stagingSSHFaultsFast = map[string]bool{"shared-state-db": true, "wrong-write-scope": true}
	stagingSSHFaultsSlow = map[string]bool{"escaped-process": true}
)

// The seeded faults that act through the server's files and its
// processes are caught through ssh: a database shared by every profile
// (the file check on the homes pulled over ssh), a write addressed to
// one profile landing in the launch profile's files (the write-scope
// check, its snapshots pulled over ssh), and, with the whole catalog
// (TENANTCANARY_STAGING_SSH_ALL), a process that outlives its session
// (the escape check, on the listing remote.processes prints). The
// hostile-plugin faults have nothing to act on in the stage: its agentd
// sandboxes with Landlock (bwrap cannot mount a new /proc inside the
// stage's own bwrap namespace), whose launcher ends what a plugin host
// started, keeper or not (docs/staging.md).
func TestStagingOverSSHCatchesSeededFaults(t *testing.T) {
	t.Parallel()
	st := startSSHStage(t)
	tg, err := harness.LoadTarget(st.target)
	require.NoError(t, err)
	var pick *regexp.Regexp
	if r := os.Getenv(stagingSSHFaults); r != "" {
		pick = regexp.MustCompile(r)
	}
	faults := []Fault{}
	for _, f := range Faults() {
		fast, slow := stagingSSHFaultsFast[f.Name], stagingSSHFaultsSlow[f.Name]
		switch {
		case pick != nil && (fast || slow):
			if pick.MatchString(f.Name) {
				faults = append(faults, f)
			}
		case fast, slow && os.Getenv(stagingSSHAll) != "":
			faults = append(faults, f)
		}
	}
	require.NotEmpty(t, faults)
	for _, f := range faults {
		st.seedFault(t, f.Name)
		reps, err := RunCatalog(t.Context(), Default(), Config{Target: tg, WorkDir: t.TempDir(), Run: "^" + regexp.QuoteMeta(f.Scenario) + "$"})
		require.NoError(t, err)
		require.Len(t, reps, 1)
		assert.True(t, found(&reps[0], f.Expect), "%s: %s over ssh found no %s finding: %s\n%s", f.Name, f.Scenario, f.Expect, reps[0].Result, strings.Join(reps[0].Log, "\n"))
		for _, fd := range reps[0].Findings() {
			if fd.Invariant == f.Expect && fd.Where.Path != "" {
				assert.True(t, strings.HasPrefix(fd.Where.Path, tg.Reach.Home), "%s: the finding names the server's path: %s", f.Name, fd.Where.Path)
			}
		}
	}
	st.seedFault(t, "")
}
