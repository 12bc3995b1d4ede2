package invariants

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/internal/sqlitefile"
)

// TestStoreRowIDs reads each owner's row ids, in row order, from a copy
// of a WAL-mode database; a missing column is an error naming the table.
func TestStoreRowIDs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "gw.db")
	db, err := sql.Open("sqlite", sqlitefile.URI(dbPath, "_pragma=journal_mode(WAL)"))
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(`CREATE TABLE logs (id INTEGER PRIMARY KEY, user_id INTEGER, content TEXT);
INSERT INTO logs (user_id, content) VALUES (1, 'a'), (2, 'b'), (1, 'c'), (NULL, 'd');`)
	require.NoError(t, err)
	s := Store{DB: dbPath, Scratch: t.TempDir()}
	got, err := StoreRowIDs(context.Background(), s, "logs", "id", "user_id")
	require.NoError(t, err)
	assert.Equal(t, map[string][]string{"1": {"1", "3"}, "2": {"2"}}, got)
	_, err = StoreRowIDs(context.Background(), s, "logs", "nope", "user_id")
	assert.ErrorContains(t, err, "logs")
}
