package invariants

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/tenants"
)

// storeWorld is a gateway's data folder: a WAL database with a token per
// tenant in its own row (user ids 1, 2, 3), kept open so its last rows
// are still in the WAL when the check reads it.
type storeWorld struct {
	ts    []*tenants.Tenant
	db    *sql.DB
	store Store
}

func newStoreWorld(t testing.TB, rows int) *storeWorld {
	t.Helper()
	set, err := tenants.Build(t.TempDir(), tenants.Options{Names: []string{"default", "alpha", "beta"}, NoProviders: true})
	require.NoError(t, err)
	dir := filepath.Join(set.Root, "data#1") // a '#' a URI would cut
	require.NoError(t, os.MkdirAll(dir, 0o755))
	path := filepath.Join(dir, "gw.db")
	db, err := sql.Open("sqlite", "file:"+strings.ReplaceAll(path, "#", "%23")+"?_pragma=journal_mode(WAL)")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	_, err = db.Exec(`PRAGMA wal_autocheckpoint=0;
CREATE TABLE tokens (id INTEGER PRIMARY KEY, user_id INTEGER, key TEXT);
CREATE TABLE logs (id INTEGER PRIMARY KEY, user_id INTEGER, content TEXT);
CREATE TABLE settings (name TEXT, value TEXT)`)
	require.NoError(t, err)
	owners := map[string]string{}
	for i, tn := range set.Tenants {
		owners[fmt.Sprint(i+1)] = tn.Name
		_, err := db.Exec(`INSERT INTO tokens (user_id, key) VALUES (?, ?)`, i+1, tn.APIServerKey())
		require.NoError(t, err)
	}
	tx, err := db.Begin()
	require.NoError(t, err)
	for r := 0; r < rows; r++ {
		i := r % len(set.Tenants)
		_, err := tx.Exec(`INSERT INTO logs (user_id, content) VALUES (?, ?)`, i+1, "a reply naming "+set.Tenants[i].Model()+fmt.Sprintf(" row %d", r))
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit())
	return &storeWorld{ts: set.Tenants, db: db, store: Store{DB: path, Scratch: t.TempDir(), Places: []StorePlace{
		{Table: "tokens", Column: "key", OwnerColumn: "user_id", Owners: owners},
		{Table: "logs", Column: "content", OwnerColumn: "user_id", Owners: owners},
	}}}
}

func (w *storeWorld) check(t testing.TB) ([]Finding, map[string]bool) {
	t.Helper()
	c, err := NewChecker(w.ts)
	require.NoError(t, err)
	return c.StoreLeaks(t.Context(), w.store)
}

func TestStoreCleanAndItsControl(t *testing.T) {
	t.Parallel()
	w := newStoreWorld(t, 9)
	_, err := os.Stat(w.store.DB + "-wal")
	require.NoError(t, err, "the rows are in the WAL")
	fs, own := w.check(t)
	assert.Empty(t, fs)
	for _, tn := range w.ts {
		assert.True(t, own[tn.Name], "positive control: %s's own token seen in its own row", tn.Name)
	}
}

func TestStoreFindsEachLeak(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		sql  func(w *storeWorld) (string, []any)
		want string
	}{
		"a foreign canary in another's row": {func(w *storeWorld) (string, []any) {
			return `INSERT INTO logs (user_id, content) VALUES (1, ?)`, []any{"answer for " + w.ts[1].Model()}
		}, "a row default owns (user_id) holds alpha's canary"},
		"a secret outside its places": {func(w *storeWorld) (string, []any) {
			return `INSERT INTO settings (name, value) VALUES ('upstream', ?)`, []any{w.ts[2].ProviderKey()}
		}, "settings.value is not one"},
		"a secret in a row nobody owns": {func(w *storeWorld) (string, []any) {
			return `INSERT INTO tokens (user_id, key) VALUES (99, ?)`, []any{w.ts[1].ProviderKey()}
		}, "a row no tenant owns"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := newStoreWorld(t, 3)
			q, args := c.sql(w)
			_, err := w.db.Exec(q, args...)
			require.NoError(t, err)
			fs, _ := w.check(t)
			require.NotEmpty(t, fs)
			assert.Equal(t, SharedStore, fs[0].Invariant)
			assert.Contains(t, fs[0].String(), c.want)
		})
	}
	t.Run("a secret in another file", func(t *testing.T) {
		t.Parallel()
		w := newStoreWorld(t, 3)
		require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(w.store.DB), "debug.log"), []byte("key="+w.ts[0].ProviderKey()), 0o644))
		fs, _ := w.check(t)
		require.Len(t, fs, 1, "the database's own files are read as rows, not as files: %v", fs)
		assert.Contains(t, fs[0].String(), "debug.log")
		assert.Equal(t, "default", fs[0].Owner)
	})
}

// BenchmarkStoreLeaks reads a store of 10,000 log rows.
func BenchmarkStoreLeaks(b *testing.B) {
	w := newStoreWorld(b, 10000)
	c, err := NewChecker(w.ts)
	require.NoError(b, err)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if fs, _ := c.StoreLeaks(b.Context(), w.store); len(fs) != 0 {
			b.Fatalf("findings in a clean store: %v", fs)
		}
	}
}
