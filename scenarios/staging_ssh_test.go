package scenarios

import (
	"os"
	"path/filepath"
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

// stagingSSHSubset are the scenarios TestStagingOverSSH runs by default:
// one of each thing the remote: block enables (a pooled run whose files
// are pulled and scanned, scoped writes, a restart, hostile tools whose
// escapes are read from the process listing).
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
	if v := os.Getenv("DEBUG_SSH_RUN"); v != "" {
		run = v
	}
	start := time.Now()
	var progress syncio.Buffer
	reps, err := RunCatalog(t.Context(), Default(), Config{Target: tg, WorkDir: workdirDebug(t), Run: run, Progress: &progress, Keep: os.Getenv("DEBUG_SSH_KEEP") != ""})
	require.NoError(t, err)
	t.Logf("progress:\n%s", progress.String())
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
	assert.LessOrEqual(t, len(skipped), 2, "at most 2 scenarios skipped")

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
	_ = filepath.Join
}

func workdirDebug(t *testing.T) string {
	if v := os.Getenv("DEBUG_SSH_KEEP"); v != "" {
		return v
	}
	return t.TempDir()
}
