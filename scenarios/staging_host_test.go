package scenarios

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/remote"
)

// Through remote.exec and remote.processes alone the harness reaches the
// staging host beyond its homes: it plants a file and a link to it in the
// workdirs (which this machine cannot see), reads /proc there, kills a
// process it finds in the listing by its pid, and crashes the server
// (the process listening on its url's port) as an OOM kill would.
func TestStagingOverSSHReachesTheServersHost(t *testing.T) {
	t.Parallel()
	st := startSSHStage(t)
	tg, err := harness.LoadTarget(st.target)
	require.NoError(t, err)
	require.Empty(t, tg.HostLacks())
	box := &harness.Sandbox{Target: tg}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	require.NoError(t, tg.Reach.CheckExec(ctx))

	// A file and a link to it, planted in the workdirs.
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	mark := "host-probe-" + hex.EncodeToString(nonce)
	dir := filepath.Join(tg.Reach.Workdirs, "it's a probe")
	require.NoError(t, box.WriteOnHost(ctx, filepath.Join(dir, "canary.txt"), []byte(mark+"\n"), 0o644))
	require.NoError(t, box.LinkOnHost(ctx, dir, filepath.Join(tg.Reach.Workdirs, "alias")))
	got, err := box.ReadOnHost(ctx, filepath.Join(tg.Reach.Workdirs, "alias", "canary.txt"), 1<<10)
	require.NoError(t, err)
	assert.Equal(t, mark+"\n", string(got), "the file read back through the link")
	_, err = os.Stat(filepath.Join(dir, "canary.txt"))
	assert.ErrorIs(t, err, os.ErrNotExist, "the file is on the server's host, not here")
	require.NoError(t, box.RemoveOnHost(ctx, dir))
	_, err = box.ReadOnHost(ctx, filepath.Join(dir, "canary.txt"), 1<<10)
	assert.Error(t, err, "removed")

	// The server is the process listening on its url's port; its
	// /proc/PID/limits is read there.
	pids, err := box.ServerPids(ctx)
	require.NoError(t, err)
	ps, err := remote.List(ctx, tg.Reach.Processes)
	require.NoError(t, err)
	for _, pid := range pids {
		var cmd string
		for _, p := range ps {
			if p.Pid == pid {
				cmd = strings.Join(p.Cmdline, " ")
			}
		}
		assert.Contains(t, cmd, " serve ", "pid %d listens on the server's port", pid)
		limits, err := box.ReadOnHost(ctx, "/proc/"+strconv.Itoa(pid)+"/limits", 1<<16)
		require.NoError(t, err)
		assert.Contains(t, string(limits), "Max open files")
	}

	// A process started on the host, found in the listing by its mark,
	// killed by its pid (seen first: the positive control).
	_, err = tg.Reach.Shell(ctx, "MARK="+remote.MustCommand(mark)+" setsid sleep 600 </dev/null >/dev/null 2>&1 &", nil, nil)
	require.NoError(t, err)
	var marked []int
	require.Eventually(t, func() bool {
		ps, err := remote.List(ctx, tg.Reach.Processes)
		require.NoError(t, err)
		marked = nil
		for _, c := range remote.Carrying(ps, []string{mark}) {
			marked = append(marked, c.Pid)
		}
		return len(marked) > 0
	}, time.Minute, 50*time.Millisecond, "the marked process is listed")
	require.NoError(t, box.KillOnHost(ctx, syscall.SIGKILL, marked...))
	require.Eventually(t, func() bool {
		ps, err := remote.List(ctx, tg.Reach.Processes)
		require.NoError(t, err)
		return len(remote.Carrying(ps, []string{mark})) == 0
	}, time.Minute, 50*time.Millisecond, "the killed process is gone")

	// A crash: the server killed at once goes quiet; the operator's start
	// brings it back.
	require.NoError(t, box.KillOnHost(ctx, syscall.SIGKILL, pids...))
	require.NoError(t, remote.WaitHealth(ctx, tg.Reach.HealthURL(tg.URL), false))
	st.restart(t, tg)
}
