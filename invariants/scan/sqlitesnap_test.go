package scan

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// settleSnapshots waits until path's version is old enough to be kept
// (fileID.settled), polling its identity.
func settleSnapshots(t testing.TB, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		id, ok := identify(path)
		require.True(t, ok, "identify %s", path)
		if id.settled(time.Now().Add(-settleTime)) {
			return
		}
		require.True(t, time.Now().Before(deadline), "%s did not settle", path)
		time.Sleep(10 * time.Millisecond)
	}
}

// One version of a database is read once, whichever matchers scan it: a
// second matcher's scan finds what an uncached scan finds, without a
// snapshot of its own; a changed database is read again; and a version
// that changed within the settle time is not kept.
func TestSQLiteSnapshotServesEveryMatcher(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	pats := testPatterns(rng, 3)
	op := Pattern{Owner: "operator", Kind: "serve_token", Value: fmt.Sprintf("serve-token-%016x", rng.Uint64())}
	tenantsM, err := Compile(pats)
	require.NoError(t, err)
	operatorM, err := Compile([]Pattern{op})
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "state.db")
	db := openWAL(t, path)
	for i := range 8 {
		v := pats[i%len(pats)].Value
		if i == 3 {
			v = op.Value
		}
		mustExec(t, db, `INSERT INTO messages (content) VALUES (?)`, fmt.Sprintf("turn %d of %s", i, v))
	}
	owners := func(r Report) map[string]int {
		require.Empty(t, r.Skipped)
		out := map[string]int{}
		for _, h := range r.Hits {
			out[h.Pattern.Owner+" "+h.Container+" "+h.Row]++
		}
		return out
	}

	// Not settled yet: each scan reads the database.
	before := snapshotsTaken.Load()
	fresh := owners(tenantsM.File(t.Context(), path))
	freshOp := owners(operatorM.File(t.Context(), path))
	if id, _ := identify(path); !id.settled(time.Now().Add(-settleTime)) {
		require.Equal(t, int64(2), snapshotsTaken.Load()-before, "a version that changed within the settle time is kept")
	}
	require.NotEmpty(t, fresh)
	require.NotEmpty(t, freshOp)

	settleSnapshots(t, path)
	before = snapshotsTaken.Load()
	first := owners(tenantsM.File(t.Context(), path))
	again := owners(operatorM.File(t.Context(), path))
	require.Equal(t, int64(1), snapshotsTaken.Load()-before, "the second matcher read the database again")
	require.Equal(t, fresh, first)
	require.Equal(t, freshOp, again, "the kept snapshot gives the operator's matcher what a read of its own gave")
	require.Contains(t, again, op.Owner+" sqlite-row messages row 4 content")

	// A new row: a new version, read anew, and its canary found.
	late := Pattern{Owner: "operator", Kind: "serve_token", Value: fmt.Sprintf("serve-token-%016x", rng.Uint64())}
	mustExec(t, db, `INSERT INTO messages (content) VALUES (?)`, "late "+late.Value)
	lateM, err := Compile([]Pattern{late})
	require.NoError(t, err)
	settleSnapshots(t, path)
	before = snapshotsTaken.Load()
	require.Contains(t, owners(lateM.File(context.Background(), path)), late.Owner+" sqlite-row messages row 9 content")
	require.Equal(t, int64(1), snapshotsTaken.Load()-before, "a changed database was served from the old snapshot")
}
