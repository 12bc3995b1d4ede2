package host_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/host"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
	"github.com/tenantcanary/tenantcanary/isolation"
)

// The defences of a profile's plugin host against a hostile plugin
// (testdata/hostile.go.txt): a deadline that kills, rlimits, a panic on a
// goroutine of the plugin's own, processes that leave the host's group.
// Every process of a test's hosts carries the test's run marker in its
// environment, so a /proc scan proves none survives.

func hostileHome(t testing.TB) string {
	home := newHome(t)
	writePlugin(t, home, "hostile", "name: hostile\nversion: \"1.0\"\n", readTestdata(t, "hostile.go.txt"))
	return home
}

// marked gives the host a run marker of its own and, at cleanup, proves no
// process carrying it is left (killing any that is, after failing).
func marked(t *testing.T, c *host.Config) string {
	t.Helper()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	id := "hostguard-" + hex.EncodeToString(b)
	c.Env = append(c.Env, procgroup.MarkerVar+"="+id)
	// The host's own processes (its keeper, itself) start with agentd's
	// allow-list only (issue 46): the marker reaches them as a launcher's
	// variable, the profile's through the protocol.
	c.Command = append([]string{"/usr/bin/env", procgroup.MarkerVar + "=" + id}, c.Command...)
	return id
}

// requireNoneMarked waits for every process carrying id to be gone.
func requireNoneMarked(t *testing.T, id, after string) {
	t.Helper()
	ok := assertEventually(func() bool { return len(procgroup.Marked(id)) == 0 })
	if !ok {
		left := procgroup.Marked(id)
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		t.Fatalf("after %s, processes of the host survive: %v", after, describe(left))
	}
}

func assertEventually(cond func() bool) bool {
	deadline := time.Now().Add(eventually)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(tick)
	}
	return cond()
}

func describe(pids []int) []string {
	var out []string
	for _, pid := range pids {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out = append(out, fmt.Sprintf("%d %q", pid, strings.ReplaceAll(string(cmd), "\x00", " ")))
	}
	return out
}

// cpuTicks is the CPU time pid has used, in clock ticks (utime+stime).
func cpuTicks(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	s := string(b)
	f := strings.Fields(s[strings.LastIndex(s, ")")+2:])
	utime, _ := strconv.Atoi(f[11])
	stime, _ := strconv.Atoi(f[12])
	return utime + stime
}

// neighbours are a hostile profile's host, its processes marked, and
// another profile's probe host beside it, which nothing the hostile host
// suffers may touch.
type neighbours struct {
	e, other *env
	id       string // the hostile host's marker
	first    int    // the hostile host's pid before the call under test
	otherPID int
}

// newNeighbours starts both hosts, the hostile one configured by set.
func newNeighbours(t *testing.T, set func(*host.Config)) *neighbours {
	t.Helper()
	n := &neighbours{}
	n.e = newEnv(t, hostileHome(t), func(c *host.Config) {
		set(c)
		n.id = marked(t, c)
	})
	n.other = newEnv(t, probeHome(t), nil)
	n.otherPID = pidOf(n.other.call("s", "hostprobe_pid", nil))
	n.first = pidOf(n.e.call("s", "hostile_pid", nil))
	return n
}

// callFails calls the hostile tool, which must fail with sentinel, its
// error naming the tool, the plugin, the profile and each of also.
func (n *neighbours) callFails(t *testing.T, tool string, sentinel error, also ...string) error {
	t.Helper()
	_, err := n.e.m.Call(context.Background(), "s", tool, nil)
	require.ErrorIs(t, err, sentinel)
	for _, want := range append([]string{tool, "plugin hostile", "profile " + filepath.Base(n.e.home)}, also...) {
		require.Contains(t, err.Error(), want)
	}
	return err
}

// requireOtherServes: the other profile's host still runs, and serves.
func (n *neighbours) requireOtherServes(t *testing.T, msg string) {
	t.Helper()
	require.True(t, procgroup.Alive(n.otherPID), msg)
	require.Equal(t, n.otherPID, pidOf(n.other.call("s", "hostprobe_pid", nil)))
}

func TestCallPastItsDeadlineKillsOnlyThatProfilesHost(t *testing.T) {
	t.Parallel()
	n := newNeighbours(t, func(c *host.Config) { c.CallTimeout = 2 * time.Second })
	e, first := n.e, n.first
	n.callFails(t, "hostile_spin", host.ErrTimeout, "plugins.host.call_timeout (2s)", "killed")
	require.True(t, markerExists(e.home, "spinning", first), "positive control: the busy loop ran in the host")
	require.Eventually(t, func() bool { return !procgroup.Alive(first) }, eventually, tick, "the spinning host %d still runs", first)
	requireNoneMarked(t, n.id, "the deadline kill")

	second := pidOf(e.call("s", "hostile_pid", nil))
	require.NotEqual(t, first, second, "a new host serves the next call")
	require.Equal(t, uint64(2), e.m.Generation())
	require.Contains(t, e.log.String(), "ran past plugins.host.call_timeout")

	n.requireOtherServes(t, "another profile's host was touched")

	// A caller's own shorter deadline is the deadline, and is named.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := e.m.Call(ctx, "s", "hostile_spin", nil)
	require.ErrorIs(t, err, host.ErrTimeout)
	require.Contains(t, err.Error(), "its deadline of")
	require.Eventually(t, func() bool { return !procgroup.Alive(second) }, eventually, tick)
}

func TestWithoutTheDeadlineKillTheBusyLoopKeepsBurning(t *testing.T) {
	t.Parallel()
	// The positive control of the deadline kill: the same call, the host
	// left running, burns CPU after its caller gave up.
	e := newEnv(t, hostileHome(t), func(c *host.Config) {
		c.CallTimeout = time.Second
		c.KeepPastDeadline = true
		c.StopGrace = time.Second
	})
	pid := pidOf(e.call("s", "hostile_pid", nil))
	_, err := e.m.Call(context.Background(), "s", "hostile_spin", nil)
	require.ErrorIs(t, err, host.ErrTimeout)
	require.NotContains(t, err.Error(), "killed")
	before := cpuTicks(t, pid)
	require.Eventually(t, func() bool { return cpuTicks(t, pid)-before >= 30 }, eventually, tick,
		"the busy loop stopped burning CPU on its own")
	require.Equal(t, pid, e.m.PID(), "the host was replaced")
}

func TestMemoryLimitEndsOnlyThatHost(t *testing.T) {
	t.Parallel()
	n := newNeighbours(t, func(c *host.Config) {
		c.Limits = host.Limits{Memory: 1 << 30, CPUSeconds: 60, FileSize: 1 << 20, OpenFiles: 256}
	})
	err := n.callFails(t, "hostile_alloc", host.ErrUnavailable)
	// The runtime's words (the race detector's own, in a race build).
	require.Regexp(t, `out of memory|ThreadSanitizer failed to allocate`, err.Error())
	requireNoneMarked(t, n.id, "the memory limit")
	require.NotEqual(t, n.first, pidOf(n.e.call("s", "hostile_pid", nil)), "a new host serves the next call")
	n.requireOtherServes(t, "another profile's host died")
}

func TestWithoutAMemoryLimitTheAllocationSucceeds(t *testing.T) {
	t.Parallel()
	// The positive control of the memory limit: 4 GiB is allowed here.
	// Touching 4 GiB under the race detector beside the whole suite once
	// took past the default 30 s call deadline: this call gets more room
	// (the limit it controls for is memory, not time).
	e := newEnv(t, hostileHome(t), func(c *host.Config) { c.CallTimeout = 3 * time.Minute })
	v := e.call("s", "hostile_alloc", nil)
	require.EqualValues(t, 4<<30, v["allocated"])
}

func TestAHostsDeathEndsEveryProcessItStarted(t *testing.T) {
	t.Parallel()
	for _, end := range []string{"close", "deadline", "crash"} {
		t.Run(end, func(t *testing.T) {
			t.Parallel()
			var id string
			e := newEnv(t, hostileHome(t), func(c *host.Config) {
				c.CallTimeout = 3 * time.Second
				id = marked(t, c)
			})
			v := e.call("s", "hostile_spawn", nil)
			hostPID, setsidPID := pidOf(v), int(v["setsid"].(float64))
			// Positive control: the scan sees the host, the keeper, and
			// both escapees (the double fork's orphan included).
			require.Eventually(t, func() bool { return len(procgroup.Marked(id)) >= 4 }, eventually, tick,
				"the marker scan never saw the host's processes: %v", describe(procgroup.Marked(id)))
			require.NotContains(t, procgroup.GroupMembers(e.m.PGID()), setsidPID, "the setsid child left the host's group")
			endHost(t, e.m, end, hostPID)
			requireNoneMarked(t, id, end)
		})
	}
}

// endHost ends m's host the way end says: close (the manager closes it),
// deadline (a call spins past its deadline) or crash (SIGKILL to pid).
func endHost(t *testing.T, m *host.Manager, end string, pid int) {
	t.Helper()
	switch end {
	case "close":
		require.NoError(t, m.Close())
	case "deadline":
		_, err := m.Call(context.Background(), "s", "hostile_spin", nil)
		require.ErrorIs(t, err, host.ErrTimeout)
	case "crash":
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	default:
		t.Fatalf("no such end %q", end)
	}
}

func TestWithoutTheKeeperADoubleForkSurvivesTheHost(t *testing.T) {
	t.Parallel()
	// The positive controls of the keeper: a host that starts none leaves
	// the double fork's orphan behind when it is closed. One is told that
	// its launcher's PID namespace ends with it, when there is no such
	// namespace; the other runs with the host-env-trusted fault and the
	// line a hostile tenant writes in its .env.
	for name, edit := range map[string]func(c *host.Config){
		"pid namespace claimed": func(c *host.Config) { c.OwnPIDNamespace = true }, // not so: no launcher
		"host-env-trusted": func(c *host.Config) {
			c.TrustProfileEnv = true
			c.Env = append(c.Env, "AGENTD_PLUGIN_HOST_KEEPER=inner")
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var id string
			e := newEnv(t, hostileHome(t), func(c *host.Config) {
				id = marked(t, c)
				edit(c)
			})
			// Whatever survives is killed however the test ends: a failed
			// assertion below must not leave the orphan running.
			t.Cleanup(func() {
				ok := assertEventually(func() bool {
					left := procgroup.Marked(id)
					for _, pid := range left {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
					return len(left) == 0
				})
				if !ok {
					t.Errorf("the test could not kill what it left: %v", describe(procgroup.Marked(id)))
				}
			})
			orphan := int(e.call("s", "hostile_spawn", nil)["orphan"].(float64))
			require.Len(t, hostProcesses(t, id), 1, "a host with no keeper")
			require.NoError(t, e.m.Close())
			left := procgroup.Marked(id)
			var orphans []string
			for _, d := range describe(left) {
				if strings.Contains(d, "sleep 601") {
					orphans = append(orphans, d)
				}
			}
			require.NotEmpty(t, orphans, "the double fork's orphan did not survive without the keeper: the keeper test proves nothing")
			require.Contains(t, left, orphan, "the orphan the plugin reported is not among the marked survivors")
		})
	}
}

func TestAPanicOnAPluginsGoroutineEndsOnlyItsHost(t *testing.T) {
	t.Parallel()
	var id string
	e := newEnv(t, hostileHome(t), func(c *host.Config) { id = marked(t, c) })
	first := pidOf(e.call("s", "hostile_pid", nil))
	out, err := e.m.Call(context.Background(), "s", "hostile_gopanic", nil)
	require.NoError(t, err)
	require.Equal(t, "started", out)
	require.Eventually(t, func() bool { return !procgroup.Alive(first) }, eventually, tick, "the host survived its plugin's panic")
	requireNoneMarked(t, id, "the panic")
	require.Eventually(t, func() bool {
		l := e.log.String()
		return strings.Contains(l, "exited (exit status 2: panic: hostile goroutine panicked") &&
			strings.Contains(l, "the last call was: call tool hostile_gopanic of plugin hostile")
	}, eventually, tick, "the profile's log does not say why the host died")
	require.NotEqual(t, first, pidOf(e.call("s", "hostile_pid", nil)), "a new host serves the next call")
}

func TestInProcessRefusesGoroutinesAndABusyLoopDoesNotHoldItsCaller(t *testing.T) {
	t.Parallel()
	home := newHome(t)
	writePlugin(t, home, "hostile", "name: hostile\nversion: \"1.0\"\n", readTestdata(t, "hostile.go.txt"))
	writePlugin(t, home, "spinner", "name: spinner\nversion: \"1.0\"\n", `package spinner

import (
	"os"

	"github.com/tenantcanary/tenantcanary/plugin"
)

func Register(ctx plugin.Context) error {
	return ctx.RegisterTool(plugin.Tool{Name: "spin_until_told", Handler: func(args map[string]any) (string, error) {
		_ = os.WriteFile(args["dir"].(string)+"/spinning", nil, 0o600)
		for {
			if _, err := os.Stat(args["dir"].(string) + "/stop"); err == nil {
				break
			}
		}
		_ = os.WriteFile(args["dir"].(string)+"/stopped", nil, 0o600)
		return "done", nil
	}})
}
`)
	ip, err := host.LoadInProcess(host.InProcessConfig{
		Profile: "inproc", Mode: "in_process", PluginsDir: filepath.Join(home, "plugins"),
		Backend: &server{}, CallTimeout: time.Second,
	})
	require.NoError(t, err)
	st := statusOf(t, ip, "hostile")
	require.Contains(t, st.Error, "go statement", "a plugin that starts goroutines loaded in-process")
	require.Contains(t, st.Error, "plugins.isolation: host")
	_, err = ip.Call(context.Background(), "s", "hostile_gopanic", nil)
	require.ErrorIs(t, err, host.ErrNotFound, "its tools are not registered")
	require.Empty(t, statusOf(t, ip, "spinner").Error, "positive control: a plugin with no goroutine loads")

	dir := t.TempDir()
	_, err = ip.Call(context.Background(), "s", "spin_until_told", map[string]any{"dir": dir})
	require.ErrorIs(t, err, host.ErrTimeout, "the busy loop held its caller")
	require.FileExists(t, filepath.Join(dir, "spinning"))
	require.NoFileExists(t, filepath.Join(dir, "stopped"), "positive control: the loop was still running when the call returned")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "stop"), nil, 0o600))
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(dir, "stopped"))
		return err == nil
	}, eventually, tick)
}

func TestAPlainHandlersNestedCallsRunAsItsCallersSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, probeHome(t), nil)
	// Many sessions at once, so a call could only find its own session by
	// knowing which call is running.
	errs := make(chan error, 16)
	for i := range 16 {
		go func() {
			s := fmt.Sprintf("session-%d", i)
			out, err := e.m.Call(context.Background(), s, "hostprobe_plain_whoami", map[string]any{"set": "v-" + s})
			if err == nil && out != fmt.Sprintf(`{"inner":{"session":%q},"state":"v-%s"}`, s, s) {
				err = fmt.Errorf("as %s got %s", s, out)
			}
			errs <- err
		}()
	}
	for range 16 {
		require.NoError(t, <-errs)
	}

	// The stand-in refuses what agentd refuses: a closed session.
	e.srv.close("session-gone")
	_, err := e.m.Call(context.Background(), "session-gone", "hostprobe_plain_whoami", nil)
	require.ErrorContains(t, err, `unknown live session "session-gone"`, "the stand-in server checks no session")

	// A goroutine the plugin started belongs to no call: refused, never
	// run as some session.
	_, err = e.m.Call(context.Background(), "s", "hostprobe_plain_goroutine", nil)
	require.ErrorContains(t, err, "belongs to no call")
}

func TestInProcessPlainHandlersNestedCallsRunAsItsCallersSession(t *testing.T) {
	t.Parallel()
	home := probeHome(t)
	srv := &server{}
	l, err := host.LoadInProcess(host.InProcessConfig{Profile: "p", Mode: "in_process", PluginsDir: filepath.Join(home, "plugins"),
		Backend: srv, Env: []string{"PROBE_MARKER_DIR=" + home}})
	require.NoError(t, err)
	srv.loader = l
	out, err := l.Call(context.Background(), "sess-1", "hostprobe_plain_whoami", map[string]any{"set": "x"})
	require.NoError(t, err)
	require.Equal(t, `{"inner":{"session":"sess-1"},"state":"x"}`, out)
}

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
func pidnsHost(t *testing.T, ownNS bool) (*host.Manager, string, *syncio.Buffer) {
	t.Helper()
	home := hostileHome(t)
	log := &syncio.Buffer{}
	cfg := host.Config{
		Profile: "pidns", Home: home, Env: hostEnvFor(home),
		Command:    append([]string{"bwrap", "--die-with-parent", "--unshare-pid", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--bind", home, home}, hostCommand()...),
		PluginsDir: home + "/plugins", Backend: &server{}, Log: log,
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
	return m, id, log
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
		m, id, _ := pidnsHost(t, false)
		_, err := m.Call(context.Background(), "s", "hostile_pid", nil)
		require.NoError(t, err)
		require.Len(t, hostProcesses(t, id), 2, "a keeper and its host")
	})
	for _, end := range []string{"close", "deadline", "crash"} {
		t.Run(end, func(t *testing.T) {
			t.Parallel()
			m, id, log := pidnsHost(t, true)
			_, err := m.Call(context.Background(), "s", "hostile_spawn", nil)
			require.NoError(t, err)
			hosts := hostProcesses(t, id)
			require.Len(t, hosts, 1, "the host alone, no keeper")
			// Positive control: the scan sees the host and both escapees.
			require.Eventually(t, func() bool { return len(procgroup.Marked(id)) >= 3 }, eventually, tick,
				"the marker scan never saw the host's processes: %v", describe(procgroup.Marked(id)))
			endHost(t, m, end, hosts[0])
			if end == "crash" {
				// The log names the process the machine sees (bwrap's), and
				// the pid the host sees in its namespace.
				died := regexp.MustCompile(`plugin host for profile pidns \(pid (\d+); pid (\d+) as it sees itself\) exited`)
				require.Eventually(t, func() bool { return died.MatchString(log.String()) }, eventually, tick, "the log: %s", log.String())
				got := died.FindStringSubmatch(log.String())
				require.NotEqual(t, got[1], got[2])
			}
			requireNoneMarked(t, id, end)
		})
	}
}

// A profile's environment cannot turn its host's keeper off: its .env is
// the tenant's, and agentd passes it to the host. With the line a hostile
// tenant would write there, the host still has its keeper (two processes
// of this binary), and the double fork's orphan still ends with the host.
// The control is TestWithoutTheKeeperADoubleForkSurvivesTheHost.
func TestAProfilesEnvironmentCannotTurnTheKeeperOff(t *testing.T) {
	t.Parallel()
	var id string
	e := newEnv(t, hostileHome(t), func(c *host.Config) {
		id = marked(t, c)
		c.Env = append(c.Env, "AGENTD_PLUGIN_HOST_KEEPER=inner", isolation.HostProcessEnv+"=0")
	})
	e.call("s", "hostile_spawn", nil)
	require.Len(t, hostProcesses(t, id), 2, "a keeper and its host")
	require.NoError(t, e.m.Close())
	requireNoneMarked(t, id, "close")
}
