package scan

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/internal/sqlitecells"
)

// openAt opens a new WAL-mode database at path with the given page size
// and no automatic checkpoint (every write stays in the -wal file). The
// page size is set before the first write (WAL mode's header is one), on
// the one connection.
func openAt(t testing.TB, path string, pageSize int) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=wal_autocheckpoint(0)")
	require.NoError(t, err)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	mustExec(t, db, fmt.Sprintf("PRAGMA page_size = %d", pageSize))
	var mode string
	require.NoError(t, db.QueryRow("PRAGMA journal_mode = WAL").Scan(&mode))
	require.Equal(t, "wal", mode)
	var size int
	require.NoError(t, db.QueryRow("PRAGMA page_size").Scan(&size))
	require.Equal(t, pageSize, size)
	return db
}

// filesOf is the bytes of the database at path and of its WAL (nil: none).
func filesOf(t testing.TB, path string) (db, wal []byte) {
	t.Helper()
	db, err := os.ReadFile(path)
	require.NoError(t, err)
	wal, err = os.ReadFile(path + "-wal")
	if errors.Is(err, os.ErrNotExist) {
		return db, nil
	}
	require.NoError(t, err)
	return db, wal
}

// sameAsEngine: the file-format reader (package sqlitecells) gives exactly the cells the SQL
// engine gives over a copy of the same bytes, in the same order.
func sameAsEngine(t *testing.T, path string, db, wal []byte) []dbCell {
	t.Helper()
	own, err := sqlitecells.Read(db, wal)
	require.NoError(t, err)
	engine, problems := engineCells(context.Background(), path, db, wal)
	require.Empty(t, problems)
	require.Equal(t, len(engine), len(own))
	for i := range engine {
		require.Equal(t, engine[i].Where, own[i].Where, "cell %d", i)
		require.Equal(t, string(engine[i].Data), string(own[i].Data), "cell %d (%s)", i, engine[i].Where) // an empty value: nil or not
	}
	return own
}

// text is n random printable bytes.
func text(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(' ' + r.IntN(95))
	}
	return string(b)
}

// TestPageCellsAsTheEngineReadsThem: over databases of every page size,
// with values from empty to many pages long (overflow chains), a WITHOUT
// ROWID table, AUTOINCREMENT's sqlite_sequence, quoted names, rows
// updated and deleted (older versions left in the WAL), a WAL cut inside
// a frame and one checkpointed into the database file, the reader of the
// file format finds every text and blob value the SQL engine finds, named
// alike.
func TestPageCellsAsTheEngineReadsThem(t *testing.T) {
	t.Parallel()
	for _, size := range []int{512, 4096, 65536} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(uint64(size), 1))
			path := filepath.Join(t.TempDir(), "state.db")
			db := openAt(t, path, size)
			for _, q := range []string{
				`CREATE TABLE sessions (id TEXT PRIMARY KEY, profile TEXT NOT NULL, title TEXT NOT NULL DEFAULT '', created_at TEXT NOT NULL)`,
				`CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, role TEXT NOT NULL, content TEXT NOT NULL DEFAULT '', data BLOB, n INTEGER, f REAL)`,
				`CREATE INDEX messages_session ON messages(session_id, id)`,
				`CREATE TABLE kv (k TEXT, v BLOB, PRIMARY KEY (k)) WITHOUT ROWID`,
				`CREATE TABLE kv2 (v BLOB, a TEXT, "k k" TEXT PRIMARY KEY, b TEXT) WITHOUT ROWID`,
				`CREATE TABLE kv3 (x TEXT, y TEXT, z BLOB, CONSTRAINT pk PRIMARY KEY (z, y DESC)) WITHOUT ROWID`,
				`CREATE TABLE "odd, table" ("a b" TEXT, [c(d)] BLOB, ` + "`e`" + ` TEXT, 'f''g' TEXT, CHECK (length("a b") >= 0))`,
			} {
				mustExec(t, db, q)
			}
			for i := range 40 {
				mustExec(t, db, `INSERT INTO sessions VALUES (?, ?, ?, ?)`, fmt.Sprintf("s%03d", i), "p"+text(r, 5), text(r, r.IntN(50)), "2026")
			}
			for i := range 300 {
				n := []int{0, 1, 100, size / 2, size, 3 * size, 10 * size}[r.IntN(7)]
				var blob any
				if i%3 == 0 {
					blob = []byte(text(r, r.IntN(2*size)))
				}
				mustExec(t, db, `INSERT INTO messages (session_id, role, content, data, n, f) VALUES (?, ?, ?, ?, ?, ?)`,
					fmt.Sprintf("s%03d", i%40), "user", text(r, n), blob, r.Int64(), r.Float64())
			}
			for i := range 120 {
				mustExec(t, db, `INSERT INTO kv VALUES (?, ?)`, fmt.Sprintf("k%04d-", i)+text(r, r.IntN(size/4)), []byte(text(r, r.IntN(size))))
			}
			mustExec(t, db, `INSERT INTO "odd, table" VALUES (?, ?, ?, ?)`, "x", []byte("y"), "z", text(r, 2*size))
			for i := range 30 {
				mustExec(t, db, `INSERT INTO kv2 VALUES (?, ?, ?, ?)`, []byte("v"+text(r, 20)), "a"+text(r, 10), fmt.Sprintf("key%03d", i), "b"+text(r, size/8))
				mustExec(t, db, `INSERT INTO kv3 VALUES (?, ?, ?)`, "x"+text(r, 10), fmt.Sprintf("y%03d", i), []byte(fmt.Sprintf("z%02d", i%4)))
			}
			mustExec(t, db, `UPDATE messages SET content = ? WHERE id % 7 = 0`, text(r, size))
			mustExec(t, db, `DELETE FROM messages WHERE id % 11 = 0`)
			mustExec(t, db, `DELETE FROM kv WHERE k LIKE 'k00%'`)

			dbBytes, wal := filesOf(t, path)
			require.NotEmpty(t, wal, "the writes are in the WAL")
			cells := sameAsEngine(t, path, dbBytes, wal)
			require.Greater(t, len(cells), 600)

			// A frame cut short, and junk past the last frame: both
			// ignored, as SQLite's own recovery ignores them.
			frame := 24 + size
			sameAsEngine(t, path, dbBytes, wal[:len(wal)-frame/2])
			sameAsEngine(t, path, dbBytes, append(append([]byte(nil), wal...), []byte(text(r, frame+7))...))

			// Checkpointed: the database file alone.
			var busy, logged, done int
			require.NoError(t, db.QueryRow(`PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &logged, &done))
			require.Zero(t, busy)
			dbBytes, wal = filesOf(t, path)
			require.Empty(t, wal)
			require.Len(t, sameAsEngine(t, path, dbBytes, wal), len(cells))
		})
	}
}

// TestPageCellsDeclineWhatTheEngineReads: a virtual table, a generated
// column, a row older than a column added since, and a schema with a
// comment are left to the SQL engine, whose cells the snapshot then has.
func TestPageCellsDeclineWhatTheEngineReads(t *testing.T) {
	t.Parallel()
	for name, qs := range map[string][]string{
		"virtual":   {`CREATE VIRTUAL TABLE search USING fts5(body)`, `INSERT INTO search VALUES ('canary-virtual')`},
		"generated": {`CREATE TABLE g (a TEXT, b TEXT GENERATED ALWAYS AS (a || 'x') VIRTUAL)`, `INSERT INTO g (a) VALUES ('canary-generated')`},
		"added":     {`CREATE TABLE t (a TEXT)`, `INSERT INTO t VALUES ('canary-old')`, `ALTER TABLE t ADD COLUMN b TEXT DEFAULT 'canary-default'`},
		"comment":   {"CREATE TABLE c (a TEXT, -- a comment, with a comma\n b TEXT)", `INSERT INTO c VALUES ('canary-comment', 'x')`},
		"name":      {`CREATE TABLE "a(b" ("c" TEXT, d TEXT)`, `INSERT INTO "a(b" VALUES ('canary-name', 'x')`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "state.db")
			db := openAt(t, path, 4096)
			for _, q := range qs {
				mustExec(t, db, q)
			}
			dbBytes, wal := filesOf(t, path)
			_, err := sqlitecells.Read(dbBytes, wal)
			require.ErrorIs(t, err, sqlitecells.ErrDecline)
			snap, problems := snapshotOf(t, path, 1<<30)
			require.Empty(t, problems)
			var all []string
			for _, c := range snap.cells {
				all = append(all, c.Where+"="+string(c.Data))
			}
			require.Contains(t, strings.Join(all, "\n"), "canary-", "the engine's cells")
		})
	}
}
