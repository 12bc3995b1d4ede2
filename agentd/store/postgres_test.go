package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/store"
	"github.com/tenantcanary/tenantcanary/internal/storeproc"
)

func startPostgres(t *testing.T) *store.Postgres {
	t.Helper()
	if err := storeproc.Available(storeproc.Postgres); err != nil {
		t.Skipf("%v (.ci/run installs it)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := storeproc.Start(ctx, storeproc.Postgres, t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	pg, err := store.OpenPostgres(ctx, srv.URL)
	require.NoError(t, err)
	t.Cleanup(pg.Close)
	// A second replica migrating the same database finds it current.
	again, err := store.OpenPostgres(ctx, srv.URL)
	require.NoError(t, err)
	again.Close()
	return pg
}

// TestPostgresStateIsPerProfile: a profile's State reads and writes its
// own rows only; another profile's stored id is unknown to it, and a
// purged profile keeps nothing.
func TestPostgresStateIsPerProfile(t *testing.T) {
	t.Parallel()
	pg := startPostgres(t)
	ctx := context.Background()
	a, b := pg.ForProfile("alpha"), pg.ForProfile("beta")

	s, err := a.CreateSession(ctx, store.Session{Profile: "beta", Model: "m-a"})
	require.NoError(t, err)
	require.Equal(t, "alpha", s.Profile, "the State's profile wins over the caller's")
	require.NoError(t, a.Append(ctx, s.ID, store.Message{Role: "user", Content: "secret of alpha"}))
	require.NoError(t, a.Append(ctx, s.ID, store.Message{Role: "assistant", Content: "ok", ToolCalls: `[{"id":"1"}]`}))
	require.NoError(t, a.SetTitle(ctx, s.ID, "t"))

	got, err := a.Session(ctx, s.ID)
	require.NoError(t, err)
	require.Equal(t, "t", got.Title)
	msgs, err := a.Messages(ctx, s.ID)
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	require.Equal(t, "secret of alpha", msgs[0].Content)
	require.Equal(t, `[{"id":"1"}]`, msgs[1].ToolCalls)

	_, err = b.Session(ctx, s.ID)
	require.True(t, errors.Is(err, store.ErrUnknownSession), "beta reads alpha's session: %v", err)
	require.ErrorIs(t, b.Append(ctx, s.ID, store.Message{Role: "user", Content: "x"}), store.ErrUnknownSession)
	require.ErrorIs(t, b.SetTitle(ctx, s.ID, "x"), store.ErrUnknownSession)
	bm, err := b.Messages(ctx, s.ID)
	require.NoError(t, err)
	require.Empty(t, bm)
	bl, err := b.Sessions(ctx)
	require.NoError(t, err)
	require.Empty(t, bl)

	require.NoError(t, pg.PurgeProfile(ctx, "alpha"))
	_, err = a.Session(ctx, s.ID)
	require.ErrorIs(t, err, store.ErrUnknownSession)
}

// TestPostgresCronLeaseHasOneOwner: a cron job's lease is held by one
// replica until it expires or is released.
func TestPostgresCronLeaseHasOneOwner(t *testing.T) {
	t.Parallel()
	pg := startPostgres(t)
	ctx := context.Background()
	require.NoError(t, pg.AcquireLease(ctx, "alpha", "j1", "r1", time.Minute))
	require.NoError(t, pg.AcquireLease(ctx, "alpha", "j1", "r1", time.Minute), "the holder renews")
	require.ErrorIs(t, pg.AcquireLease(ctx, "alpha", "j1", "r2", time.Minute), store.ErrLeaseHeld)
	require.NoError(t, pg.AcquireLease(ctx, "beta", "j1", "r2", time.Minute), "another profile's job of the same id is another lease")
	require.NoError(t, pg.ReleaseLease(ctx, "alpha", "j1", "r1"))
	require.NoError(t, pg.AcquireLease(ctx, "alpha", "j1", "r2", time.Millisecond))
	// An expired lease is taken over: poll until the millisecond passed.
	deadline := time.Now().Add(10 * time.Second)
	for pg.AcquireLease(ctx, "alpha", "j1", "r3", time.Minute) != nil {
		require.True(t, time.Now().Before(deadline), "an expired lease was never taken over")
	}

	require.NoError(t, pg.RecordJobRun(ctx, store.JobRun{Profile: "alpha", ID: "j1", Name: "n", LastRun: time.Now(), LastStatus: "ok", LastReplica: "r3"}))
	require.NoError(t, pg.RecordJobRun(ctx, store.JobRun{Profile: "alpha", ID: "j1", Name: "n", LastRun: time.Now(), LastStatus: "ok", LastReplica: "r3"}))
	runs, err := pg.JobRuns(ctx, "alpha")
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.EqualValues(t, 2, runs[0].Runs)
	other, err := pg.JobRuns(ctx, "beta")
	require.NoError(t, err)
	require.Empty(t, other)
}
