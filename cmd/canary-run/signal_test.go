package main

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
)

// TestInterruptCancels sends this process a SIGINT while interruptible
// holds it: the context ends and the message says how to quit at once. Not
// parallel: the signal is process-wide.
func TestInterruptCancels(t *testing.T) {
	var stderr syncio.Buffer
	ctx, stop := interruptible(context.Background(), &stderr)
	defer stop()
	require.NoError(t, ctx.Err())
	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGINT))
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("SIGINT did not cancel the context")
	}
	require.Eventually(t, func() bool { return stderr.String() != "" }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, "canary-run: interrupt: stopping every process (again to quit at once)\n", stderr.String())
}

func TestStopWithoutSignal(t *testing.T) {
	t.Parallel()
	var stderr syncio.Buffer
	ctx, stop := interruptible(context.Background(), &stderr)
	stop()
	require.ErrorIs(t, ctx.Err(), context.Canceled)
	stop() // twice is fine
	require.Empty(t, stderr.String())
}
