package sqlitefile_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/tenantcanary/tenantcanary/internal/sqlitefile"
)

// TestURIOpensAnyPath: a database whose path holds '?', '#' and '%' is
// created and read back at that very path, with the query still applied.
func TestURIOpensAnyPath(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a?b#c%41d")
	require.NoError(t, mkdir(dir))
	path := filepath.Join(dir, "state.db")
	db, err := sql.Open("sqlite", sqlitefile.URI(path, "_pragma=journal_mode(WAL)"))
	require.NoError(t, err)
	_, err = db.Exec("CREATE TABLE t (v TEXT); INSERT INTO t VALUES ('here')")
	require.NoError(t, err)
	var mode string
	require.NoError(t, db.QueryRow("PRAGMA journal_mode").Scan(&mode))
	require.Equal(t, "wal", mode, "the query reached SQLite")
	require.NoError(t, db.Close())
	require.FileExists(t, path, "the file is at the path given, not at a prefix of it")

	ro, err := sql.Open("sqlite", sqlitefile.URI(path, "mode=ro"))
	require.NoError(t, err)
	defer ro.Close()
	var v string
	require.NoError(t, ro.QueryRow("SELECT v FROM t").Scan(&v))
	require.Equal(t, "here", v)
	_, err = ro.Exec("INSERT INTO t VALUES ('no')")
	require.Error(t, err, "mode=ro applied")
	require.Equal(t, "file:/x%3fy%23z%25", sqlitefile.URI("/x?y#z%", ""))
}

func mkdir(dir string) error { return os.MkdirAll(dir, 0o755) }
