package store

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/homefs"
)

// OpenIn opens a home's state.db through the home, and refuses a
// database, WAL or shared-memory file that is a link or not a regular
// file, before SQLite sees it.
func TestOpenInRefusesLinksAndOddFiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := t.TempDir()
	mine, other := filepath.Join(root, "mine"), filepath.Join(root, "other")
	require.NoError(t, os.Mkdir(mine, 0o700))
	require.NoError(t, os.Mkdir(other, 0o700))

	db, err := OpenIn(ctx, homefs.Home{Dir: mine}, "state.db")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(mine, "state.db"), db.Path(), "messages name the home's file, not /proc")
	s, err := db.CreateSession(ctx, Session{Profile: "mine", Model: "m"})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	db, err = OpenIn(ctx, homefs.Home{Dir: mine}, "state.db")
	require.NoError(t, err)
	_, err = db.Session(ctx, s.ID)
	require.NoError(t, err, "the same database again")
	require.NoError(t, db.Close())

	for _, f := range []string{"state.db", "state.db-wal", "state.db-shm"} {
		home := filepath.Join(root, "link-"+f)
		require.NoError(t, os.Mkdir(home, 0o700))
		require.NoError(t, os.Symlink(filepath.Join(other, f), filepath.Join(home, f)))
		_, err := OpenIn(ctx, homefs.Home{Dir: home}, "state.db")
		require.ErrorIs(t, err, homefs.ErrLinkOut, f)
		require.ErrorContains(t, err, "home file "+f+" is a link out of the home")
	}
	fifo := filepath.Join(root, "fifo")
	require.NoError(t, os.Mkdir(fifo, 0o700))
	require.NoError(t, syscall.Mkfifo(filepath.Join(fifo, "state.db-wal"), 0o600))
	_, err = OpenIn(ctx, homefs.Home{Dir: fifo}, "state.db")
	require.ErrorIs(t, err, homefs.ErrNotRegular)
	entries, err := os.ReadDir(other)
	require.NoError(t, err)
	require.Empty(t, entries, "nothing made in the other home")
}
