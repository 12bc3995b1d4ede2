package sandbox_test

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
	"github.com/tenantcanary/tenantcanary/agentd/sandbox/sandboxtest"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

// forEachFault runs fn per mode, with the launcher-env fault off and on.
func forEachFault(t *testing.T, modes []sandbox.Mode, fn func(t *testing.T, mode sandbox.Mode, fault bool)) {
	t.Helper()
	forEachMode(t, modes, func(t *testing.T, mode sandbox.Mode) {
		for _, fault := range []bool{false, true} {
			t.Run("fault="+strconv.FormatBool(fault), func(t *testing.T) {
				t.Parallel()
				fn(t, mode, fault)
			})
		}
	})
}

// TestToolEnvironmentReachesOnlyTheCommand (issue 46): a tenant's variable
// in the command's environment reaches the command, and no process of the
// tree that runs outside the sandbox (bwrap's outer process, the
// launcher's first stage and keeper) starts with it; with the
// launcher-env fault they do (the positive control). Mode none's command
// runs unconfined by the operator's choice: its launcher is still kept
// clean.
func TestToolEnvironmentReachesOnlyTheCommand(t *testing.T) {
	t.Parallel()
	forEachFault(t, []sandbox.Mode{sandbox.Bwrap, sandbox.Landlock, sandbox.None}, func(t *testing.T, mode sandbox.Mode, fault bool) {
		home := t.TempDir()
		mark := "X_TENANT_MARK=" + token(t)
		p := sandbox.Policy{Mode: mode, Home: home, Dir: home, Self: sandboxtest.Self(t), TmpRoot: t.TempDir(), EnvOutside: fault}
		c, err := p.Command([]string{"bash", "-c", `echo "$$ X_TENANT_MARK=$X_TENANT_MARK"; read -r _`}, append(baseEnv(home), mark))
		require.NoError(t, err)
		in, err := c.StdinPipe()
		require.NoError(t, err)
		out, err := c.StdoutPipe()
		require.NoError(t, err)
		procgroup.Prepare(c.Cmd)
		require.NoError(t, c.Start())
		c.Started()
		waited := make(chan struct{})
		line, rerr := bufio.NewReader(out).ReadString('\n')
		tree := append([]int{c.Process.Pid}, procgroup.Descendants(c.Process.Pid)...)
		go func() { _ = c.Wait(); close(waited) }()
		t.Cleanup(func() {
			in.Close()
			c.Stop(waited)
			for _, pid := range tree {
				require.False(t, procgroup.Alive(pid), "pid %d of the tree survived Stop", pid)
			}
		})
		require.NoError(t, rerr)
		self, seen, _ := strings.Cut(strings.TrimSpace(line), " ")
		require.Equal(t, mark, seen, "(a) the command sees its environment")

		outside := procgroup.SameMountNS(tree)
		if mode != sandbox.Bwrap { // no PID namespace: the command's pid is ours
			outside = without(outside, self)
		}
		want := 2 // the launcher's first stage and keeper
		if mode == sandbox.Bwrap {
			want = 1 // bwrap's outer process
		}
		require.Len(t, outside, want, "the programs outside the sandbox, of the tree %v", tree)
		var carrying []int
		for _, pid := range outside {
			for _, kv := range procgroup.Environ(pid) {
				if kv == mark {
					carrying = append(carrying, pid)
				}
			}
		}
		if fault {
			require.NotEmpty(t, carrying, "(c) positive control: with the launcher-env fault the outside programs start with the tenant's variable")
			return
		}
		require.Empty(t, carrying, "(b) a program outside the sandbox started with the tenant's variable")
	})
}

// without is pids less the one named s.
func without(pids []int, s string) []int {
	var out []int
	for _, pid := range pids {
		if strconv.Itoa(pid) != s {
			out = append(out, pid)
		}
	}
	return out
}

// TestTenantPreloadRunsOnlyInsideTheSandbox (issue 46): a tenant's
// LD_PRELOAD (a shared object in its own home) is loaded by the commands
// in its sandbox only, never by bwrap or the launcher, which run as the
// server outside it; with the launcher-env fault an outside process loads
// it (the positive control). No process the command started survives.
func TestTenantPreloadRunsOnlyInsideTheSandbox(t *testing.T) {
	t.Parallel()
	forEachFault(t, []sandbox.Mode{sandbox.Bwrap, sandbox.Landlock}, func(t *testing.T, mode sandbox.Mode, fault bool) {
		home := t.TempDir()
		so, log := sandboxtest.Preload(t, home)
		p := sandbox.Policy{Mode: mode, Home: home, Dir: home, Self: sandboxtest.Self(t), TmpRoot: t.TempDir(), EnvOutside: fault}
		c, err := p.Command([]string{"bash", "-c", "true"}, append(baseEnv(home), "LD_PRELOAD="+so))
		require.NoError(t, err)
		procgroup.Prepare(c.Cmd)
		require.NoError(t, c.Start())
		c.Started()
		err = c.Wait()
		waited := make(chan struct{})
		close(waited)
		c.Stop(waited)
		require.NoError(t, err)

		loads := sandboxtest.Loads(t, log)
		var inside, outside []sandboxtest.Loaded
		for _, l := range loads {
			if l.Outside || l.MountNS == "-" { // a pid as we number them (bwrap's inside are its namespace's)
				require.False(t, procgroup.Alive(l.Pid), "pid %d, which loaded the probe, survived Stop", l.Pid)
			}
			if l.Outside {
				outside = append(outside, l)
			} else {
				inside = append(inside, l)
			}
		}
		require.NotEmpty(t, inside, "the command in the sandbox loads the tenant's LD_PRELOAD: %+v", loads)
		if !fault {
			require.Empty(t, outside, "a process outside the sandbox ran the tenant's code: %+v", loads)
			return
		}
		if mode == sandbox.Landlock && !sandboxtest.Dynamic(sandboxtest.Self(t)[0]) {
			t.Skip("positive control: this test binary, the launcher, is statically linked: LD_PRELOAD never reaches it")
		}
		require.NotEmpty(t, outside, "positive control: with the launcher-env fault an outside process runs the tenant's code: %+v", loads)
	})
}

// The probe's own control: run unsandboxed, it records this machine's
// mount namespace, so Outside can be true at all.
func TestPreloadProbeSeesOutside(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	so, log := sandboxtest.Preload(t, home)
	cmd := exec.Command("true")
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+so)
	require.NoError(t, cmd.Run())
	loads := sandboxtest.Loads(t, log)
	require.Len(t, loads, 1)
	require.True(t, loads[0].Outside, "%+v", loads[0])
}
