package scan

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// One version of a database is read once through a FileCache, whichever
// matchers scan it: a second matcher's scan finds what an uncached scan
// finds, without a read of its own; a version that changed within the
// settle time is not kept; a changed database is read again.
func TestSQLiteSnapshotServesEveryMatcher(t *testing.T) {
	t.Parallel()
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
	fresh := owners(tenantsM.File(t.Context(), path))
	freshOp := owners(operatorM.File(t.Context(), path))
	require.NotEmpty(t, fresh)
	require.Contains(t, freshOp, op.Owner+" sqlite-row messages row 4 content")

	fc := NewFileCache()
	fc.settle = time.Hour // every version here is fresh: none is kept
	owners(tenantsM.WithCache(fc).File(t.Context(), path))
	owners(operatorM.WithCache(fc).File(t.Context(), path))
	require.Equal(t, 2, fc.dbReads, "a version that changed within the settle time was kept")

	fc = NewFileCache()
	fc.settle = 0
	require.Equal(t, fresh, owners(tenantsM.WithCache(fc).File(t.Context(), path)))
	require.Equal(t, freshOp, owners(operatorM.WithCache(fc).File(t.Context(), path)), "the kept snapshot gives the operator's matcher what a read of its own gave")
	require.Equal(t, 1, fc.dbReads, "the second matcher read the database again")

	// A new row: a new version, read anew, and its canary found.
	late := Pattern{Owner: "operator", Kind: "serve_token", Value: fmt.Sprintf("serve-token-%016x", rng.Uint64())}
	mustExec(t, db, `INSERT INTO messages (content) VALUES (?)`, "late "+late.Value)
	lateM, err := Compile([]Pattern{late})
	require.NoError(t, err)
	require.Contains(t, owners(lateM.WithCache(fc).File(t.Context(), path)), late.Owner+" sqlite-row messages row 9 content")
	require.Equal(t, 2, fc.dbReads, "a changed database was served from the old snapshot")
}
