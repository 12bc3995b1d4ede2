package host_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/host"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

// A frame bigger than the pipe holds is written in parts (the rest under
// the call's deadline) and arrives whole.
func TestAFrameBiggerThanThePipeArrivesWhole(t *testing.T) {
	t.Parallel()
	e := newEnv(t, probeHome(t), nil)
	big := strings.Repeat("x", 1<<20)
	out, err := e.m.Call(context.Background(), "s", "hostprobe_echo", map[string]any{"big": big})
	require.NoError(t, err)
	require.Equal(t, "ok", out)
	e.seePID()
	out, err = e.m.Call(context.Background(), "s", "hostprobe_echo", nil)
	require.NoError(t, err, "the connection is still good after a partial write")
	require.Equal(t, "ok", out)
}

// A host that stops reading its stdin costs a big call an error at its
// deadline (not a hang); the host is killed and a new one answers.
func TestAHostThatStopsReadingCostsATimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, probeHome(t), func(c *host.Config) { c.Backoff = func(int) time.Duration { return 0 } })
	require.NoError(t, e.m.Start(context.Background()))
	e.seePID()
	pid := e.m.PID()
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	// The stopped host never takes the 1 MiB frame, so the call always
	// waits the whole deadline; it is seconds long so that a loaded machine
	// still reaches the write before it (a sub-second one could end first
	// and be reported as a timeout of the queue, not a broken write).
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := e.m.Call(ctx, "s", "hostprobe_echo", map[string]any{"big": strings.Repeat("y", 1<<20)})
	require.ErrorIs(t, err, host.ErrUnavailable, "a write the host does not take by the deadline breaks the connection")
	require.Contains(t, err.Error(), "plugin host")
	require.Eventually(t, func() bool { return !procgroup.Alive(pid) }, eventually, tick, "the stopped host was killed")
	require.Eventually(t, func() bool {
		out, err := e.m.Call(context.Background(), "s", "hostprobe_echo", nil)
		return err == nil && out == "ok"
	}, eventually, tick)
	e.seePID()
	require.NotEqual(t, pid, e.m.PID())
}
