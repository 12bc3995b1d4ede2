package procgroup

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestKillReapsWholeGroup(t *testing.T) {
	t.Parallel()
	// The leader starts a grandchild that would outlive a leader-only kill.
	cmd := exec.Command("bash", "-c", "sleep 300 & echo $!; wait")
	grandchild := startGroup(t, cmd)
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

func TestMarkedFindsDescendantsInOtherGroups(t *testing.T) {
	t.Parallel()
	id := "test-" + strconv.Itoa(time.Now().Nanosecond())
	// A child that starts a grandchild in a group of its own (setsid), as a
	// server does with its shells.
	cmd := exec.Command("bash", "-c", "setsid sleep 300 & echo $!; wait")
	cmd.Env = append(cmd.Environ(), MarkerVar+"="+id)
	grandchild := startGroup(t, cmd)
	// The grandchild is forked in the child's group, leaves it when its
	// setsid runs, then becomes sleep; while it execs, its environment
	// cannot be read. The group is killed once it is sleep in a session of
	// its own.
	settled := func() bool {
		sid, ok := SessionOf(grandchild)
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(grandchild) + "/comm")
		return ok && sid == grandchild && strings.TrimSpace(string(comm)) == "sleep"
	}
	require.Eventually(t, settled, 10*time.Second, 5*time.Millisecond, "the grandchild never became sleep in a session of its own")
	require.ElementsMatch(t, []int{cmd.Process.Pid, grandchild}, Marked(id))
	require.NoError(t, Kill(cmd.Process.Pid))
	_ = cmd.Wait()
	// Read until the group's death has settled: a process being
	// reparented can be unreadable for a moment.
	require.Eventually(t, func() bool { m := Marked(id); return len(m) == 1 && m[0] == grandchild }, 5*time.Second, 5*time.Millisecond,
		"the group kill misses a grandchild in its own group (marked now: %v)", Marked(id))
	require.NoError(t, Kill(grandchild))
	require.Eventually(t, func() bool { return len(Marked(id)) == 0 }, 10*time.Second, 5*time.Millisecond)
	require.Empty(t, Marked(""))
}

func TestParseStatCutsAtTheLastParenthesis(t *testing.T) {
	t.Parallel()
	st, ok := parseStat([]byte("4242 (evil) 1 2 3) S 17 4242 4242 0 -1 4194560 99 0 0 0\n"))
	require.True(t, ok)
	require.Equal(t, procStat{state: 'S', ppid: 17, pgrp: 4242, session: 4242}, st)
	st, ok = parseStat([]byte("7 (sh) Z 1 7 5"))
	require.True(t, ok)
	require.Equal(t, procStat{state: 'Z', ppid: 1, pgrp: 7, session: 5}, st)
	require.False(t, st.live())
	for _, bad := range []string{"", "7 (sh)", "7 (sh) S", "7 (sh) S x 1 1", "7 (sh) S 1 2"} {
		_, ok := parseStat([]byte(bad))
		require.False(t, ok, "%q", bad)
	}
}

func TestReadStatOfThisProcess(t *testing.T) {
	t.Parallel()
	st, ok := readStat(os.Getpid())
	require.True(t, ok)
	require.Equal(t, os.Getppid(), st.ppid)
	require.Equal(t, syscall.Getpgrp(), st.pgrp)
	sid, err := unix.Getsid(0)
	require.NoError(t, err)
	require.Equal(t, sid, st.session)
	_, ok = readStat(-1)
	require.False(t, ok)
}

// startGroup prepares cmd (a bash that prints the pid of a grandchild it
// started) in a group of its own, starts it and returns the grandchild's
// pid.
func startGroup(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	Prepare(cmd)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	buf := make([]byte, 32)
	n, err := out.Read(buf)
	require.NoError(t, err)
	grandchild, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	require.NoError(t, err)
	return grandchild
}

// TestEmptySessionReachesOtherGroups: a session whose shell put a child in
// a process group of its own is emptied whole, and a session with no
// member left is empty at the first look.
func TestEmptySessionReachesOtherGroups(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("bash", "-c", "set -m; sleep 300 & echo $!; wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { KillSession(cmd.Process.Pid); _ = cmd.Wait() })
	line := make([]byte, 32)
	n, err := out.Read(line)
	require.NoError(t, err)
	child, err := strconv.Atoi(strings.TrimSpace(string(line[:n])))
	require.NoError(t, err)
	sid := cmd.Process.Pid
	require.Eventually(t, func() bool { st, ok := readStat(child); return ok && st.pgrp == child }, 10*time.Second, 5*time.Millisecond,
		"the child is in a group of its own")
	require.Contains(t, SessionMembers(sid), child)

	require.True(t, EmptySession(sid, 10*time.Second))
	_ = cmd.Wait()
	require.False(t, Alive(child), "the child in its own group survived")
	require.Empty(t, SessionMembers(sid))
	require.True(t, EmptySession(sid, 0), "an empty session")
}
