package scan

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
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

// A database a server writes while the scan reads it may read torn: a
// checkpoint and a restart of its WAL between the read of the database
// and the read of the WAL pair a database of one moment with a WAL of a
// later one. The scan sees the WAL's header change under it and reads
// again: it reads every row as a read at rest does, the canary's among
// them. Not parallel: it sets testHookBetweenReads and tornReads.
func TestATornReadOfADatabaseIsReadAgain(t *testing.T) {
	m, pats := compileTest(t, 1)
	leak := pats[0]
	path := filepath.Join(t.TempDir(), "state.db")
	db := openWAL(t, path)
	mustExec(t, db, `PRAGMA wal_autocheckpoint=0`) // checkpoints only where the test says
	// Rows of a hundred bytes: a leaf page holds dozens, so a delete in
	// one part of the table leaves the pages of another alone.
	filler := strings.Repeat("x", 100)
	mustExec(t, db, `INSERT INTO messages (content) VALUES (?)`, "kept "+leak.Value)
	mustExec(t, db, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 400) INSERT INTO messages (content) SELECT 'row ' || i || ' ' || ? FROM n`, filler)
	mustExec(t, db, `PRAGMA wal_checkpoint(TRUNCATE)`)

	// tear: commits the database file does not hold yet (in the WAL), and,
	// between the scan's two reads, what a server does: a checkpoint, then
	// commits that start the WAL over.
	reads, tearAt := 0, 1
	tear := func(walOnly, after string) {
		mustExec(t, db, walOnly)
		reads = 0
		testHookBetweenReads = func() {
			if reads++; reads == tearAt {
				mustExec(t, db, `PRAGMA wal_checkpoint(RESTART)`)
				mustExec(t, db, after)
			}
		}
	}
	t.Cleanup(func() { testHookBetweenReads = nil })
	cells := func(s *dbSnapshot, problems []Skip) []string {
		var out []string
		for _, c := range s.cells {
			out = append(out, c.Where+" "+string(c.Data))
		}
		return append(out, fmt.Sprint(problems))
	}
	snapshot := func() []string { return cells(snapshotOf(t, path, 64<<20)) }

	tear(`DELETE FROM messages WHERE id BETWEEN 2 AND 20`, `INSERT INTO messages (content) VALUES ('late')`)
	r := m.File(t.Context(), path)
	testHookBetweenReads = nil
	require.Equal(t, 2, reads, "the torn read was not read again")
	require.Empty(t, r.Skipped)
	found := false
	for _, h := range r.Hits {
		found = found || (h.Container == "sqlite-row" && h.Row == "messages row 1 content")
	}
	require.True(t, found, "the canary's row, in the read after the torn one")

	tear(`DELETE FROM messages WHERE id BETWEEN 100 AND 110`, `DELETE FROM messages WHERE id BETWEEN 200 AND 210`)
	got := snapshot()
	testHookBetweenReads = nil
	require.Equal(t, 2, reads)
	require.Equal(t, snapshot(), got, "the rows of a torn read are those of a read at rest")

	// Positive control of the tear: read once, with no second read, the
	// same tear gives rows no read at rest gives (the rows the WAL had
	// deleted, back from the database file of before the checkpoint).
	defer func(n int) { tornReads = n }(tornReads)
	tornReads = 1
	tear(`DELETE FROM messages WHERE id BETWEEN 41 AND 50`, `DELETE FROM messages WHERE id BETWEEN 300 AND 305`)
	once := snapshot()
	testHookBetweenReads = nil
	require.Equal(t, 1, reads)
	require.NotEqual(t, snapshot(), once, "the test's tear tore nothing")
}

// snapshotOf is takeSnapshot of the database at path and its WAL.
func snapshotOf(t *testing.T, path string, limit int64) (*dbSnapshot, []Skip) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	w, err := os.Open(path + "-wal")
	require.NoError(t, err)
	defer w.Close()
	return takeSnapshot(t.Context(), path, f, w, limit)
}
