package host_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/host"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/isolation"
	"github.com/tenantcanary/tenantcanary/plugin"
)

const platformPlugin = `package platformprobe

import "github.com/tenantcanary/tenantcanary/plugin"

func Register(ctx plugin.Context) error {
	return ctx.RegisterPlatform("x", "X", func(cfg map[string]any) (any, error) { return nil, nil })
}
`

func probeHome(t testing.TB) string {
	home := newHome(t)
	writePlugin(t, home, "hostprobe", "name: hostprobe\nversion: \"1.0\"\n", readTestdata(t, "hostprobe.go.txt"))
	writePlugin(t, home, "platformprobe", "name: platformprobe\nversion: \"1.0\"\n", platformPlugin)
	writePlugin(t, home, "fanoutprobe", "name: fanoutprobe\nversion: \"1.0\"\n", readTestdata(t, "fanoutprobe.go.txt"))
	return home
}

func statusOf(t *testing.T, l host.Loader, name string) host.PluginStatus {
	t.Helper()
	ps, err := l.Plugins(context.Background())
	require.NoError(t, err)
	for _, p := range ps {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no plugin %q among %+v", name, ps)
	return host.PluginStatus{}
}

// The seed's main scenario: out of process, nested dispatch, hooks,
// providers, the boundary's refusal, and a crash that costs one error.
func TestPluginRunsOutOfProcessAndSurvivesItsHostCrashing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, probeHome(t), nil)
	ctx := context.Background()

	first := e.call("s1", "hostprobe_pid", map[string]any{"x": 1})
	hostPID := pidOf(first)
	require.NotZero(t, hostPID)
	require.NotEqual(t, os.Getpid(), hostPID, "tool result came from the server process")
	require.Equal(t, hostPID, e.m.PID())

	// The plugin's code never ran here: its load marker names the host.
	require.True(t, markerExists(e.home, "loaded-hostprobe", hostPID), "positive control: the host left its marker")
	require.False(t, markerExists(e.home, "loaded-hostprobe", os.Getpid()), "plugin code ran in the server process")
	require.Contains(t, e.log.String(), "hostprobe printed this to stdout", "a plugin's printing goes to the profile's log")

	// A handler calling back into the server while the server waits on it.
	nested := e.call("s1", "hostprobe_nested", nil)
	require.Equal(t, hostPID, pidOf(nested))
	require.Equal(t, "nested", nested["x"])
	deep := e.call("deep-session", "hostprobe_depth", map[string]any{"n": 6})
	require.Equal(t, hostPID, pidOf(deep))
	require.Equal(t, "deep-session", deep["session"], "the session survives six nested hops")

	// Hooks fire in the host.
	require.NoError(t, e.m.Hook(ctx, "s1", "post_tool_call", map[string]any{"tool_name": "read_file", "result": "ok"}))
	require.Contains(t, e.call("s1", "hostprobe_pid", nil)["seen"], "read_file")

	// A provider proxy satisfies the server's interface and answers from the host.
	var painter plugin.ImageGenProvider
	painter, err := e.m.ImageGenProvider(ctx, "hostpainter")
	require.NoError(t, err)
	require.Equal(t, "hostpainter", painter.Name())
	img, err := painter.Generate(ctx, "cat", nil)
	require.NoError(t, err)
	require.Equal(t, map[string]any{"success": true, "image": fmt.Sprintf("cat@%d", hostPID)}, img)

	// The facade crosses as the caller's session.
	out, err := e.m.Call(ctx, "s-state", "hostprobe_state", map[string]any{"v": "42"})
	require.NoError(t, err)
	require.Equal(t, "42", out)
	require.Equal(t, "42", e.srv.state["s-state"]["k"])

	// Live-object surfaces fail that plugin with the boundary's reason; its sibling loaded.
	bad := statusOf(t, e.m, "platformprobe")
	require.Contains(t, bad.Error, "RegisterPlatform")
	require.Contains(t, bad.Error, isolation.UnsupportedMethods["RegisterPlatform"])
	require.Empty(t, statusOf(t, e.m, "hostprobe").Error)

	// The plugin's own errors and panics are typed, and cost nothing else.
	_, err = e.m.Call(ctx, "s1", "hostprobe_fail", nil)
	require.ErrorIs(t, err, host.ErrPlugin)
	require.Contains(t, err.Error(), "the plugin's own failure")
	_, err = e.m.Call(ctx, "s1", "hostprobe_panic", nil)
	require.ErrorIs(t, err, host.ErrPlugin)
	require.Contains(t, err.Error(), "the plugin panicked")
	require.Equal(t, hostPID, e.m.PID())

	// Calls in flight when the host dies each get an error naming it.
	inflight := make(chan error, 3)
	for n := range 3 {
		go func() {
			_, err := e.m.Call(ctx, "s1", "hostprobe_hang", map[string]any{"n": n})
			inflight <- err
		}()
	}
	require.Eventually(t, func() bool {
		for n := range 3 {
			if _, err := os.Stat(filepath.Join(e.home, fmt.Sprintf("hanging-%d", n))); err != nil {
				return false
			}
		}
		return true
	}, eventually, tick, "the hanging calls never started")

	// A plugin killing its host costs one error naming the host.
	_, err = e.m.Call(ctx, "s1", "hostprobe_crash", nil)
	require.Error(t, err)
	require.ErrorIs(t, err, host.ErrUnavailable)
	require.Contains(t, err.Error(), "plugin host")
	require.Contains(t, err.Error(), "exit status 3")
	for range 3 {
		err := <-inflight
		require.ErrorIs(t, err, host.ErrUnavailable)
		require.Contains(t, err.Error(), "plugin host")
	}

	var after map[string]any
	require.Eventually(t, func() bool {
		out, err := e.m.Call(ctx, "s1", "hostprobe_pid", nil)
		if err != nil {
			return false
		}
		e.seePID()
		after = map[string]any{"out": out}
		return true
	}, eventually, tick, "a new host never answered")
	newPID := e.m.PID()
	require.NotEqual(t, hostPID, newPID)
	require.NotEqual(t, os.Getpid(), newPID)
	require.Contains(t, after["out"], fmt.Sprintf(`"pid":%d`, newPID))
	require.False(t, syscallAlive(hostPID), "the crashed host was reaped")
}

func syscallAlive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestHostRunsWithTheProfilesEnvironmentAndHome(t *testing.T) {
	t.Parallel()
	e := newEnv(t, probeHome(t), nil)
	v := e.call("s", "hostprobe_env", nil)
	require.Equal(t, e.home, v["cwd"])
	var envs []string
	for _, x := range v["env"].([]any) {
		envs = append(envs, x.(string))
	}
	require.Contains(t, envs, "PROFILE_CANARY=canary-"+filepath.Base(e.home))
	require.Contains(t, envs, isolation.HostProcessEnv+"=1")
	for _, kv := range envs {
		k, _, _ := strings.Cut(kv, "=")
		require.Contains(t, []string{hostEnv, "GORACE", "HOME", "PATH", "PROFILE_CANARY", isolation.HostProcessEnv}, k,
			"the host's environment holds %q, which the profile did not give it", k)
	}
}

func TestConcurrentSessionsEachSeeTheirOwnSessionInNestedCalls(t *testing.T) {
	t.Parallel()
	e := newEnv(t, probeHome(t), nil)
	// Whoever first touches the host must not leak into later calls.
	require.Equal(t, "host-creator", e.call("host-creator", "hostprobe_whoami", nil)["session"])

	var wg sync.WaitGroup
	errs := make(chan error, 64)
	// expect calls tool as session s on a goroutine of its own, wanting want.
	expect := func(s, tool, want, what string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := e.m.Call(context.Background(), s, tool, nil)
			if err != nil {
				errs <- err
				return
			}
			if out != want {
				errs <- fmt.Errorf("%s got %s", what, out)
			}
		}()
	}
	for _, s := range []string{"session-B", "session-C"} {
		for range 16 {
			expect(s, "hostprobe_whoami", fmt.Sprintf(`{"inner":{"session":%q},"session":%q}`, s, s), "as "+s)
		}
	}
	// Goroutines of one handler calling back at once, from two sessions.
	for _, s := range []string{"session-B", "session-C"} {
		expect(s, "hostprobe_fanout", strings.TrimSuffix(strings.Repeat(fmt.Sprintf(`{"session":%q}`+"\n", s), 8), "\n"), "fan-out as "+s)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestHostedMemoryProviderStaysLiveAcrossSIGKILL(t *testing.T) {
	t.Parallel()
	home := newHome(t)
	writePlugin(t, home, "memprobe", "name: memprobe\n", readTestdata(t, "memprobe.go.txt"))
	e := newEnv(t, home, nil)
	ctx := context.Background()

	var mem plugin.MemoryProvider
	mem, err := e.m.MemoryProvider(ctx, "memprobe")
	require.NoError(t, err)
	first, err := mem.Prefetch(ctx, "q")
	require.NoError(t, err)
	e.seePID()
	firstPID := e.m.PID()
	require.Equal(t, fmt.Sprintf("%d:1", firstPID), first, "level read live from the plugin's object")
	require.NotEqual(t, os.Getpid(), firstPID)
	require.True(t, mem.IsAvailable(ctx))

	// The provider's config schema is user code too: it runs in the host.
	schema, err := e.m.ConfigSchema(ctx, "memprobe")
	require.NoError(t, err)
	require.Equal(t, float64(firstPID), schema["pid"])

	require.NoError(t, syscall.Kill(firstPID, syscall.SIGKILL))
	require.Eventually(t, func() bool { return e.m.PID() != firstPID }, eventually, tick, "the manager never saw its host die")

	// The proxy the server already holds re-binds to the new host's object.
	again, err := mem.Prefetch(ctx, "q")
	require.NoError(t, err)
	e.seePID()
	newPID := e.m.PID()
	require.NotEqual(t, firstPID, newPID)
	require.NotEqual(t, os.Getpid(), newPID)
	require.Equal(t, fmt.Sprintf("%d:1", newPID), again)
	require.Equal(t, uint64(2), e.m.Generation())
}

const killerPlugin = `package killer

import (
	"os"

	"github.com/tenantcanary/tenantcanary/plugin"
)

func Register(ctx plugin.Context) error {
	os.Exit(7)
	return nil
}
`

const finePlugin = `package fine

import (
	"os"
	"strconv"

	"github.com/tenantcanary/tenantcanary/plugin"
)

func Register(ctx plugin.Context) error {
	return ctx.RegisterTool(plugin.Tool{Name: ctx.Name() + "_pid", Handler: func(args map[string]any) (string, error) {
		return strconv.Itoa(os.Getpid()), nil
	}})
}
`

func TestPluginThatKillsItsHostWhileLoadingIsNotReloaded(t *testing.T) {
	t.Parallel()
	home := newHome(t)
	writePlugin(t, home, "a_fine", "name: a_fine\n", finePlugin)
	writePlugin(t, home, "m_killer", "name: m_killer\n", killerPlugin)
	writePlugin(t, home, "z_fine", "name: z_fine\n", finePlugin)
	e := newEnv(t, home, nil)
	ctx := context.Background()

	for _, tool := range []string{"a_fine_pid", "z_fine_pid"} {
		out, err := e.m.Call(ctx, "s", tool, nil)
		require.NoError(t, err, "sibling tool %s", tool)
		require.Equal(t, fmt.Sprint(e.m.PID()), out)
	}
	e.seePID()
	killer := statusOf(t, e.m, "m_killer")
	require.Contains(t, killer.Error, "killed its plugin host while loading")
	require.Empty(t, statusOf(t, e.m, "a_fine").Error)
	require.Empty(t, statusOf(t, e.m, "z_fine").Error)
	require.Equal(t, uint64(2), e.m.Generation(), "one death, one restart without the killer")
}

func TestCrashLoopStopsAtTheBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t, probeHome(t), func(c *host.Config) {
		c.Backoff = func(int) time.Duration { return time.Millisecond }
	})
	ctx := context.Background()
	for i := range 3 {
		_, err := e.m.Call(ctx, "s", "hostprobe_crash", nil)
		e.seePID()
		require.ErrorIs(t, err, host.ErrUnavailable, "death %d", i+1)
		require.Contains(t, err.Error(), "plugin host")
	}
	_, err := e.m.Call(ctx, "s", "hostprobe_pid", nil)
	require.ErrorIs(t, err, host.ErrBudgetExhausted)
	require.Contains(t, err.Error(), "died 3 times")
	require.Zero(t, e.m.PID(), "no host runs once the budget is spent")
	require.Equal(t, uint64(3), e.m.Generation())
}

func TestHungToolLeftRunningStillLetsItsHostExitOnClose(t *testing.T) {
	t.Parallel()
	// KeepPastDeadline: the host is not killed at the deadline (the
	// default kills it; see TestCallPastItsDeadlineKillsOnlyThatProfilesHost).
	e := newEnv(t, probeHome(t), func(c *host.Config) { c.CallTimeout = time.Second; c.KeepPastDeadline = true })
	pid := pidOf(e.call("s", "hostprobe_pid", nil))
	_, err := e.m.Call(context.Background(), "s", "hostprobe_hang", nil)
	require.ErrorIs(t, err, host.ErrTimeout)
	require.Contains(t, err.Error(), "plugin host")
	require.Contains(t, err.Error(), "hostprobe_hang")
	require.Equal(t, pid, pidOf(e.call("s", "hostprobe_pid", nil)), "the same host still serves")

	// Hung handlers do not keep the host alive once its stdin closes.
	require.NoError(t, e.m.Close())
	require.Contains(t, e.log.String(), fmt.Sprintf("plugin host %d: the connection closed", pid))
}

func TestOversizedResultIsAClearErrorNotADeadHost(t *testing.T) {
	t.Parallel()
	e := newEnv(t, probeHome(t), nil)
	pid := pidOf(e.call("s", "hostprobe_pid", nil))
	_, err := e.m.Call(context.Background(), "s", "hostprobe_huge", nil)
	require.ErrorIs(t, err, host.ErrUnsupported)
	require.Contains(t, err.Error(), "frame")
	require.Equal(t, pid, pidOf(e.call("s", "hostprobe_pid", nil)))
}

func TestUnknownToolIsNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t, probeHome(t), nil)
	_, err := e.m.Call(context.Background(), "s", "no_such_tool", nil)
	require.ErrorIs(t, err, host.ErrNotFound)
	e.seePID()
}

func TestHandshakeIsChecked(t *testing.T) {
	t.Parallel()
	for name, argv := range map[string][]string{
		"not a hello":       {"sh", "-c", "echo hi; sleep 5"},
		"wrong version":     {"sh", "-c", `echo '{"op":"hello","body":{"protocol":99,"pid":1}}'; sleep 5`},
		"exits immediately": {"true"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, newHome(t), func(c *host.Config) { c.Command = argv })
			err := e.m.Start(context.Background())
			require.Error(t, err)
			require.Contains(t, err.Error(), "start plugin host for profile")
			if name == "wrong version" {
				require.ErrorIs(t, err, host.ErrProtocol)
				require.Contains(t, err.Error(), "protocol 99")
			}
		})
	}
}

func TestCloseIsIdempotentAndRefusesLaterCalls(t *testing.T) {
	t.Parallel()
	e := newEnv(t, probeHome(t), nil)
	pid := pidOf(e.call("s", "hostprobe_pid", nil))
	require.NoError(t, e.m.Close())
	require.NoError(t, e.m.Close())
	require.False(t, syscallAlive(pid))
	_, err := e.m.Call(context.Background(), "s", "hostprobe_pid", nil)
	require.ErrorIs(t, err, host.ErrClosed)
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	_, err := host.New(host.Config{Profile: "p", Backend: &server{}})
	require.ErrorContains(t, err, "Command is empty")
	_, err = host.New(host.Config{Command: []string{"x"}, Backend: &server{}})
	require.ErrorContains(t, err, "Profile is empty")
	_, err = host.New(host.Config{Profile: "p", Command: []string{"x"}})
	require.ErrorContains(t, err, "Backend is nil")
}

var _ = errors.Is

// The host dies with its parent: a server killed with SIGKILL (no chance
// to clean up) leaves no host behind.
func TestHostDiesWithItsParent(t *testing.T) {
	t.Parallel()
	home := probeHome(t)
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{parentEnv + "=" + home, "PATH=" + os.Getenv("PATH")}
	procgroup.Prepare(cmd)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() {
		_ = procgroup.Kill(cmd.Process.Pid)
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	hostPID, err := strconv.Atoi(strings.TrimSpace(line))
	require.NoError(t, err, "the parent said %q", line)
	require.True(t, procgroup.Alive(hostPID), "positive control: the host runs while its parent does")
	require.NotEqual(t, cmd.Process.Pid, hostPID)

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.Eventually(t, func() bool { return !procgroup.Alive(hostPID) }, eventually, tick, "host %d outlived its parent", hostPID)
}

func TestOpenPicksTheLoaderByMode(t *testing.T) {
	t.Parallel()
	home := probeHome(t)
	cfg := host.Config{Profile: "p", Command: hostCommand(), Home: home, Env: hostEnvFor(home), PluginsDir: filepath.Join(home, "plugins"), Backend: &server{}}
	l, err := host.Open(isolation.Host, cfg)
	require.NoError(t, err)
	require.IsType(t, &host.Manager{}, l)
	require.NoError(t, l.Close())
	require.False(t, markerExists(home, "loaded-hostprobe", os.Getpid()), "opening in host mode ran no plugin code here")
	_, err = host.Open("sandbox", cfg)
	require.ErrorContains(t, err, `unknown isolation mode "sandbox"`)
}

const badArgsPlugin = `package badargs

import (
	"context"

	"github.com/tenantcanary/tenantcanary/plugin"
)

func Register(ctx plugin.Context) error {
	return ctx.RegisterTool(plugin.Tool{Name: "badargs_dispatch", ContextHandler: func(c context.Context, args map[string]any) (string, error) {
		// A function cannot cross the wire: the nested call must fail, not the host.
		return ctx.DispatchTool(c, "native_echo", map[string]any{"f": func() {}})
	}})
}
`

func TestNestedCallWithArgumentsJSONCannotCarryFailsThatCallOnly(t *testing.T) {
	t.Parallel()
	home := newHome(t)
	writePlugin(t, home, "badargs", "name: badargs\n", badArgsPlugin)
	writePlugin(t, home, "hostprobe", "name: hostprobe\n", readTestdata(t, "hostprobe.go.txt"))
	e := newEnv(t, home, nil)
	pid := pidOf(e.call("s", "hostprobe_pid", nil))
	_, err := e.m.Call(context.Background(), "s", "badargs_dispatch", nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), "encode the call's arguments")
	require.Equal(t, pid, pidOf(e.call("s", "hostprobe_pid", nil)), "the same host still serves")
}

// A host can die between the server picking it as live and writing to it.
// Such a request never reached the host, so it goes to the host that
// replaces it, whatever kind of request it is; it is not the caller's
// error. BreakWriteSide makes that moment: the server's end of the host's
// stdin is closed before the server has seen the host go.
func TestARequestTheDyingHostNeverReceivedGoesToItsSuccessor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// do runs one request and returns the pid of the host that answered.
		do func(t *testing.T, e *env) int
	}{
		{"tool call", func(t *testing.T, e *env) int { return pidOf(e.call("s1", "hostprobe_pid", nil)) }},
		{"hook", func(t *testing.T, e *env) int {
			require.NoError(t, e.m.Hook(ctx, "s1", "post_tool_call", map[string]any{"tool_name": "hook-marker"}))
			after := e.call("s1", "hostprobe_pid", nil)
			require.Contains(t, after["seen"], "hook-marker", "the hook ran in the host that answers now")
			return pidOf(after)
		}},
		{"provider", func(t *testing.T, e *env) int {
			painter, err := e.m.ImageGenProvider(ctx, "hostpainter")
			require.NoError(t, err)
			img, err := painter.Generate(ctx, "cat", nil)
			require.NoError(t, err)
			var pid int
			_, err = fmt.Sscanf(img["image"].(string), "cat@%d", &pid)
			require.NoError(t, err)
			return pid
		}},
		{"config schema", func(t *testing.T, e *env) int {
			schema, err := e.m.ConfigSchema(ctx, "memprobe")
			require.NoError(t, err)
			return int(schema["pid"].(float64))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			home := probeHome(t)
			writePlugin(t, home, "memprobe", "name: memprobe\n", readTestdata(t, "memprobe.go.txt"))
			e := newEnv(t, home, nil)
			first := tc.do(t, e)
			e.seePID()
			require.Equal(t, e.m.PID(), first, "positive control: the live host answered")

			host.BreakWriteSide(e.m)
			next := tc.do(t, e)
			e.seePID()
			require.NotEqual(t, first, next, "the request reached a host that was gone")
			require.Equal(t, e.m.PID(), next)
			require.Equal(t, uint64(2), e.m.Generation(), "one restart, not more")
		})
	}
}
