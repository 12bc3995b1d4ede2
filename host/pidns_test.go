package host_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/host"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
)

// requireBwrapPIDNS skips unless bubblewrap can make a PID namespace here.
func requireBwrapPIDNS(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap is not installed (.ci/run installs bubblewrap)")
	}
	if out, err := exec.Command("bwrap", "--unshare-pid", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true").CombinedOutput(); err != nil {
		t.Skipf("bwrap cannot make a PID namespace here (user namespaces refused?): %v: %s", err, out)
	}
}

// pidnsHost is a manager whose host bubblewrap runs in a PID namespace of
// its own, told so (Config.OwnPIDNamespace) or not; its processes carry a
// marker of their own. Its host's hello pid is the namespace's, so the
// process checks here go by the marker.
func pidnsHost(t *testing.T, ownNS bool) (*host.Manager, string) {
	t.Helper()
	home := hostileHome(t)
	cfg := host.Config{
		Profile: "pidns", Home: home, Env: hostEnvFor(home),
		Command:    append([]string{"bwrap", "--die-with-parent", "--unshare-pid", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--bind", home, home}, hostCommand()...),
		PluginsDir: home + "/plugins", Backend: &server{}, Log: &syncio.Buffer{},
		ExtractEnv:      []string{hostEnv + "=1", "HOME=" + home, "PATH=" + os.Getenv("PATH")},
		CallTimeout:     3 * time.Second,
		OwnPIDNamespace: ownNS,
	}
	id := marked(t, &cfg)
	m, err := host.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = m.Close()
		requireNoneMarked(t, id, "the test")
	})
	return m, id
}

// hostProcesses are the marked processes running this test binary: the
// host, and its keeper when it has one.
func hostProcesses(t *testing.T, id string) []int {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	var out []int
	for _, pid := range procgroup.Marked(id) {
		if exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); err == nil && exe == self {
			out = append(out, pid)
		}
	}
	return out
}

// A host in a PID namespace of its own that ends with it starts no keeper,
// and every process it started still ends with it: closed, past a
// deadline, or killed. Its positive control is the same host not told of
// the namespace, which has its keeper (two processes of this binary, not
// one); TestWithoutTheKeeperADoubleForkSurvivesTheHost is the control of
// the escapees themselves.
func TestInAPIDNamespaceOfItsOwnAHostNeedsNoKeeper(t *testing.T) {
	t.Parallel()
	requireBwrapPIDNS(t)
	t.Run("control: not told, it keeps its keeper", func(t *testing.T) {
		t.Parallel()
		m, id := pidnsHost(t, false)
		_, err := m.Call(context.Background(), "s", "hostile_pid", nil)
		require.NoError(t, err)
		require.Len(t, hostProcesses(t, id), 2, "a keeper and its host")
	})
	for _, end := range []string{"close", "deadline", "crash"} {
		t.Run(end, func(t *testing.T) {
			t.Parallel()
			m, id := pidnsHost(t, true)
			_, err := m.Call(context.Background(), "s", "hostile_spawn", nil)
			require.NoError(t, err)
			hosts := hostProcesses(t, id)
			require.Len(t, hosts, 1, "the host alone, no keeper")
			// Positive control: the scan sees the host and both escapees.
			require.Eventually(t, func() bool { return len(procgroup.Marked(id)) >= 3 }, eventually, tick,
				"the marker scan never saw the host's processes: %v", describe(procgroup.Marked(id)))
			switch end {
			case "close":
				require.NoError(t, m.Close())
			case "deadline":
				_, err := m.Call(context.Background(), "s", "hostile_spin", nil)
				require.ErrorIs(t, err, host.ErrTimeout)
			case "crash":
				require.NoError(t, syscall.Kill(hosts[0], syscall.SIGKILL))
			}
			requireNoneMarked(t, id, end)
		})
	}
}
