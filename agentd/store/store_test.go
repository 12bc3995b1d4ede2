package store

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSessionsAndMessagesSurviveReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, db := openTemp(ctx, t)
	v, err := db.Version(ctx)
	require.NoError(t, err)
	require.Equal(t, len(migrations), v)

	s, err := db.CreateSession(ctx, Session{Profile: "work", Model: "m1"})
	require.NoError(t, err)
	require.NotEmpty(t, s.ID)
	msgs := []Message{
		{Role: "user", Content: "hi"},
		{Role: "assistant", ToolCalls: `[{"id":"c1"}]`},
		{Role: "tool", Content: "out", ToolCallID: "c1", Name: "terminal"},
		{Role: "assistant", Content: "done"},
	}
	for _, m := range msgs {
		require.NoError(t, db.Append(ctx, s.ID, m))
	}
	require.NoError(t, db.SetTitle(ctx, s.ID, "a title"))
	require.ErrorIs(t, db.Append(ctx, "nope", Message{Role: "user"}), ErrUnknownSession)
	require.NoError(t, db.Close())

	_, err = os.Stat(path + "-wal")
	require.True(t, err == nil || os.IsNotExist(err))

	db, err = Open(ctx, path)
	require.NoError(t, err, "reopening migrates nothing twice")
	defer db.Close()
	got, err := db.Session(ctx, s.ID)
	require.NoError(t, err)
	require.Equal(t, "work", got.Profile)
	require.Equal(t, "m1", got.Model)
	require.Equal(t, "a title", got.Title)
	back, err := db.Messages(ctx, s.ID)
	require.NoError(t, err)
	require.Len(t, back, 4)
	for i := range msgs {
		back[i].CreatedAt = msgs[i].CreatedAt
	}
	require.Equal(t, msgs, back)
	_, err = db.Session(ctx, "missing")
	require.ErrorIs(t, err, ErrUnknownSession)
	list, err := db.Sessions(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
}

func TestWALAndConcurrentWriters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, a, b := twoHandles(ctx, t)
	s, err := a.CreateSession(ctx, Session{Profile: "p", Model: "m"})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(db *DB) {
			defer wg.Done()
			for j := 0; j < 25; j++ {
				require.NoError(t, db.Append(ctx, s.ID, Message{Role: "user", Content: "x"}))
			}
		}(map[bool]*DB{true: a, false: b}[i%2 == 0])
	}
	wg.Wait()
	msgs, err := b.Messages(ctx, s.ID)
	require.NoError(t, err)
	require.Len(t, msgs, 100)
	require.FileExists(t, path+"-wal", "WAL mode keeps a -wal file while open")
}

func TestNewerSchemaIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, db := openTemp(ctx, t)
	_, err := db.w.ExecContext(ctx, "INSERT INTO schema_migrations(version, applied_at) VALUES (99, 'x')")
	require.NoError(t, err)
	require.NoError(t, db.Close())
	_, err = Open(ctx, path)
	require.ErrorContains(t, err, "schema version 99 is newer")
}

// Many writers of one process, and a second handle as another process
// would hold, all at once: every write commits, none sees SQLite's lock.
func TestManyConcurrentWritersNeverSeeTheLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, a, b := twoHandles(ctx, t)
	const writers, each = 120, 4
	var wg sync.WaitGroup
	errs := make(chan error, writers*(each+2))
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db := a
			if i%6 == 0 {
				db = b
			}
			s, err := db.CreateSession(ctx, Session{Profile: "p", Model: "m"})
			if err != nil {
				errs <- err
				return
			}
			for range each {
				if err := db.Append(ctx, s.ID, Message{Role: "user", Content: "x"}); err != nil {
					errs <- err
				}
				if _, err := db.Messages(ctx, s.ID); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a concurrent write failed: %v", err)
	}
	list, err := a.Sessions(ctx)
	require.NoError(t, err)
	require.Len(t, list, writers)
}

// Another process holding the write lock past the busy timeout is
// ErrBusy, never SQLite's "database is locked".
func TestALockHeldElsewhereIsErrBusy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	db, err := open(ctx, path, path, 100*time.Millisecond, nil)
	require.NoError(t, err)
	defer db.Close()
	other, err := sql.Open("sqlite", dsn(path, 0))
	require.NoError(t, err)
	defer other.Close()
	conn, err := other.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)
	_, err = db.CreateSession(ctx, Session{Profile: "p", Model: "m"})
	require.ErrorIs(t, err, ErrBusy)
	require.NotContains(t, err.Error(), "database is locked")
	_, err = conn.ExecContext(ctx, "ROLLBACK")
	require.NoError(t, err)
	_, err = db.CreateSession(ctx, Session{Profile: "p", Model: "m"})
	require.NoError(t, err, "the lock released, writes go through")
}

// twoHandles opens a new state.db twice, as two processes would hold it;
// both close when the test ends.
// openTemp opens a new state.db in a temporary folder; the test closes it.
func openTemp(ctx context.Context, t *testing.T) (path string, db *DB) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "state.db")
	db, err := Open(ctx, path)
	require.NoError(t, err)
	return path, db
}

func twoHandles(ctx context.Context, t *testing.T) (path string, a, b *DB) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "state.db")
	for _, db := range []**DB{&a, &b} {
		var err error
		*db, err = Open(ctx, path)
		require.NoError(t, err)
		t.Cleanup(func() { (*db).Close() })
	}
	return path, a, b
}
