package procgroup

import (
	"os"
	"os/exec"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// A child started here is in this mount namespace, and /proc shows the
// environment it started with.
func TestSameMountNSAndEnviron(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sleep", "600")
	cmd.Env = []string{"X_OUTSIDE_TEST=1"}
	Prepare(cmd)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = Kill(cmd.Process.Pid); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	require.Equal(t, []int{pid}, SameMountNS([]int{pid, 1 << 30}), "a missing pid is left out")
	require.True(t, slices.Contains(Environ(pid), "X_OUTSIDE_TEST=1"))
	require.Nil(t, Environ(1<<30))
	require.NotContains(t, Environ(pid), "PATH="+os.Getenv("PATH"))
}
