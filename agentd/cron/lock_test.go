package cron

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A tenant's terminal can flock its own cron/jobs.lock and hold it: a
// read-modify-write gives up after lockWait with ErrLocked instead of
// waiting for ever, and goes on once the lock is free.
func TestAHeldLockIsWaitedForBoundedly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	j := Jobs{Dir: dir}
	f, err := os.OpenFile(filepath.Join(dir, "jobs.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX))

	start := time.Now()
	_, err = j.Create("n", "p", "every 1h", start)
	require.ErrorIs(t, err, ErrLocked)
	require.Less(t, time.Since(start), lockWait+time.Second)

	require.NoError(t, syscall.Flock(int(f.Fd()), syscall.LOCK_UN))
	_, err = j.Create("n", "p", "every 1h", time.Now())
	require.NoError(t, err)
}
