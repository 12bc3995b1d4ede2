package procgroup

import (
	"bufio"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestKillTreeReachesWhatLeftTheGroup(t *testing.T) {
	t.Parallel()
	// The leader starts a child in a session of its own (so outside the
	// leader's group), which starts a grandchild.
	cmd := exec.Command("bash", "-c", `setsid bash -c 'sleep 300 & echo $$ $!; wait' & wait`)
	Prepare(cmd)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	f := strings.Fields(line)
	require.Len(t, f, 2)
	child, _ := strconv.Atoi(f[0])
	grandchild, _ := strconv.Atoi(f[1])
	leader := cmd.Process.Pid

	require.NotContains(t, GroupMembers(leader), child, "positive control: the child left the group")
	require.Subset(t, Descendants(leader), []int{child, grandchild})

	killed := KillTree(leader, leader)
	_ = cmd.Wait()
	require.Subset(t, killed, []int{child, grandchild})
	require.Eventually(t, func() bool { return !Alive(child) && !Alive(grandchild) }, 10*time.Second, 5*time.Millisecond,
		"a process outside the group survived the tree kill")
}

func TestKillDescendantsSparesTheRoot(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("bash", "-c", `sleep 300 & echo $!; read x`)
	Prepare(cmd)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = Kill(cmd.Process.Pid); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	sleeper, _ := strconv.Atoi(strings.TrimSpace(line))
	require.Equal(t, []int{sleeper}, KillDescendants(cmd.Process.Pid))
	require.Eventually(t, func() bool { return !Alive(sleeper) }, 10*time.Second, 5*time.Millisecond)
	require.True(t, Alive(cmd.Process.Pid), "the root was killed too")
	_ = in.Close()
}
