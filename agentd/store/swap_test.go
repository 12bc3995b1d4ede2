package store

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/homefs"
	"github.com/tenantcanary/tenantcanary/agentd/homefs/hostile"
)

// A state.db swapped after the scope opened it (a FIFO, a link to a
// device, another database) is never opened by a connection made later:
// the readers' pool checks the file it opens by path against the one the
// database first opened, and the connections opened with it keep reading
// the file they opened.
func TestALaterConnectionRefusesASwappedFile(t *testing.T) {
	for _, k := range append([]hostile.Kind{"other-db"}, hostile.Kinds...) {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			home := t.TempDir()
			h := homefs.Home{Dir: home}
			db, err := OpenIn(ctx, h, "state.db")
			require.NoError(t, err)
			defer db.Close()
			_, err = db.CreateSession(ctx, Session{Profile: "p", Model: "m"})
			require.NoError(t, err)

			// Hold every warm reader, so the next read opens a connection.
			var held []*sql.Conn
			for range readers {
				c, err := db.r.Conn(ctx)
				require.NoError(t, err)
				held = append(held, c)
			}
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()
			file := filepath.Join(home, "state.db")
			require.NoError(t, os.Rename(file, filepath.Join(home, "aside.db")))
			if k == "other-db" {
				other, err := Open(ctx, filepath.Join(t.TempDir(), "x.db"))
				require.NoError(t, err)
				require.NoError(t, other.Close())
				require.NoError(t, os.Rename(other.Path(), file))
			} else {
				hostile.Plant(t, file, k)
			}
			_, err = db.Version(ctx)
			require.Error(t, err, "a new connection to a swapped file is refused")
			require.NoError(t, ctx.Err(), "refused at once, not at the deadline")

			var n int
			require.NoError(t, held[0].QueryRowContext(ctx, "SELECT COUNT(*) FROM sessions").Scan(&n))
			require.Equal(t, 1, n, "an open connection reads the file it opened")
		})
	}
}
