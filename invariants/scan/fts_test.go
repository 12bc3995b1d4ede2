package scan

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSQLiteVirtualAndWithoutRowid: an FTS5 index and a WITHOUT ROWID table
// are read row by row like any other table, with nothing skipped.
func TestSQLiteVirtualAndWithoutRowid(t *testing.T) {
	t.Parallel()
	m, pats := compileTest(t, 2)
	path := filepath.Join(t.TempDir(), "state.db")
	db := openWAL(t, path)
	for _, q := range []string{
		`CREATE VIRTUAL TABLE search USING fts5(body)`,
		`CREATE TABLE kv (k TEXT PRIMARY KEY, v BLOB) WITHOUT ROWID`,
	} {
		mustExec(t, db, q)
	}
	mustExec(t, db, `INSERT INTO search (body) VALUES (?)`, "indexed "+pats[6].Value)
	mustExec(t, db, `INSERT INTO kv (k, v) VALUES ('x', ?)`, []byte(pats[16].Value))
	r := m.File(context.Background(), path)
	require.Empty(t, r.Skipped)
	rows := map[string]bool{}
	for _, h := range hitsBy(r, "sqlite-row") {
		rows[h.Pattern.Value+" "+h.Row] = true
	}
	require.True(t, rows[pats[6].Value+" search row 1 body"], "%v", rows)
	require.True(t, rows[pats[16].Value+" kv row 1 v"], "%v", rows)
}
