package storeproc

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

func startOrSkip(t *testing.T, kind Kind) *Server {
	t.Helper()
	if err := Available(kind); err != nil {
		t.Skipf("%v (.ci/run installs it)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Start(ctx, kind, t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// TestRedisKeepsDataOverRestart: a real redis-server answers on loopback,
// keeps a value over Restart, and leaves no process once stopped.
func TestRedisKeepsDataOverRestart(t *testing.T) {
	t.Parallel()
	s := startOrSkip(t, Redis)
	ctx := context.Background()
	opt, err := redis.ParseURL(s.URL)
	require.NoError(t, err)
	c := redis.NewClient(opt)
	defer c.Close()
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	pid := s.Pid()
	require.NoError(t, s.Restart(ctx))
	require.False(t, procgroup.Alive(pid), "the first redis-server outlived Restart")
	got, err := c.Get(ctx, "k").Result()
	require.NoError(t, err)
	require.Equal(t, "v", got)
	pid = s.Pid()
	require.NoError(t, s.Stop())
	require.False(t, procgroup.Alive(pid), "redis-server outlived Stop")
	require.Empty(t, procgroup.GroupMembers(pid))
}

// TestPostgresKeepsRowsOverRestart: a real PostgreSQL (as nobody when the
// test runs as root) answers over TCP, keeps a committed row over
// Restart, and its whole process group is gone once stopped.
func TestPostgresKeepsRowsOverRestart(t *testing.T) {
	t.Parallel()
	s := startOrSkip(t, Postgres)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, s.URL)
	require.NoError(t, err)
	_, err = c.Exec(ctx, "CREATE TABLE t (v text); INSERT INTO t VALUES ('kept')")
	require.NoError(t, err)
	_ = c.Close(ctx)
	pid := s.Pid()
	require.NoError(t, s.Restart(ctx))
	require.Empty(t, procgroup.GroupMembers(pid), "the first postgres's group outlived Restart")
	c, err = pgx.Connect(ctx, s.URL)
	require.NoError(t, err)
	var v string
	require.NoError(t, c.QueryRow(ctx, "SELECT v FROM t").Scan(&v))
	require.Equal(t, "kept", v)
	_ = c.Close(ctx)
	pid = s.Pid()
	require.NoError(t, s.Stop())
	require.Empty(t, procgroup.GroupMembers(pid), "postgres's group outlived Stop")
}

func TestStartRejectsUnknownKind(t *testing.T) {
	_, err := Start(context.Background(), "mysql", t.TempDir())
	require.ErrorContains(t, err, `unknown kind "mysql"`)
}
