package procgroup

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestKillReapsWholeGroup(t *testing.T) {
	t.Parallel()
	// The leader starts a grandchild that would outlive a leader-only kill.
	cmd := exec.Command("bash", "-c", "sleep 300 & echo $!; wait")
	Prepare(cmd)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	buf := make([]byte, 32)
	n, err := out.Read(buf)
	require.NoError(t, err)
	grandchild, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	require.NoError(t, err)
	leader := cmd.Process.Pid
	require.True(t, Alive(grandchild))
	require.ElementsMatch(t, []int{leader, grandchild}, GroupMembers(leader))

	require.NoError(t, Kill(leader))
	_ = cmd.Wait()
	require.Eventually(t, func() bool { return !Alive(grandchild) }, 10*time.Second, 5*time.Millisecond,
		"grandchild %d survived the group kill", grandchild)
	require.Empty(t, GroupMembers(leader))
	require.NoError(t, Kill(leader), "killing a gone group is not an error")
}

func TestContextCancelKillsGroup(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := CommandContext(ctx, "bash", "-c", "sleep 300 & wait")
	require.NoError(t, cmd.Start())
	leader := cmd.Process.Pid
	require.Eventually(t, func() bool { return len(GroupMembers(leader)) == 2 }, 10*time.Second, 5*time.Millisecond)
	cancel()
	require.Error(t, cmd.Wait())
	require.Eventually(t, func() bool { return len(GroupMembers(leader)) == 0 }, 10*time.Second, 5*time.Millisecond)
}

func TestSignalRejectsBadGroup(t *testing.T) {
	t.Parallel()
	require.ErrorContains(t, Kill(0), "not a valid group id")
	require.False(t, Alive(0))
}
