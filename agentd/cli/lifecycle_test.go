package cli_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// lifecyclePlugin records its session start and end hooks and its memory
// provider's Initialize and Shutdown, one line each, in the file
// $LIFECYCLE_LOG names (outside the home, which a deleted profile loses).
const lifecyclePlugin = `package lifecycle

import (
	"context"
	"fmt"
	"os"

	"github.com/tenantcanary/tenantcanary/plugin"
)

func logLine(format string, args ...any) error {
	f, err := os.OpenFile(os.Getenv("LIFECYCLE_LOG"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, format+"\n", args...)
	return err
}

type mem struct{}

func (mem) Name() string                                  { return "lifemem" }
func (mem) IsAvailable(ctx context.Context) bool          { return true }
func (mem) Prefetch(ctx context.Context, q string) (string, error) { return "", nil }
func (mem) SyncTurn(ctx context.Context, u, a string) error { return nil }

func (mem) Initialize(ctx context.Context, s string) error {
	return logLine("init %s %s %d", s, plugin.SessionID(ctx), os.Getpid())
}

func (mem) Shutdown(ctx context.Context, s string) error {
	return logLine("shutdown %s %s %d", s, plugin.SessionID(ctx), os.Getpid())
}

func Register(ctx plugin.Context) error {
	if err := ctx.RegisterHook("on_session_start", func(c context.Context, p map[string]any) error {
		return logLine("start %v %s %v %v %d", p["session_id"], plugin.SessionID(c), p["resumed"], p["profile"], os.Getpid())
	}); err != nil {
		return err
	}
	if err := ctx.RegisterHook("on_session_end", func(c context.Context, p map[string]any) error {
		return logLine("end %v %s %q %v %d", p["session_id"], plugin.SessionID(c), p["reason"], p["profile"], os.Getpid())
	}); err != nil {
		return err
	}
	return ctx.RegisterMemoryProvider(mem{})
}
`

// lifecycleTenant installs the lifecycle plugin in tn's home, in a host
// launched with env only (no sandbox, so it can write the log outside the
// home: the operator's managed scope says so, for every profile of w), and
// returns the log's path.
func lifecycleTenant(t *testing.T, w *world, tn *tenant) string {
	return lifecycleTenantIn(t, w, tn, "host")
}

// lifecycleTenantIn is lifecycleTenant in isolation mode mode.
func lifecycleTenantIn(t *testing.T, w *world, tn *tenant, mode string) string {
	t.Helper()
	installPlugin(t, "lifecycle", lifecyclePlugin, tn)
	logPath := filepath.Join(w.root, "lifecycle-"+tn.name+".log")
	env, err := os.ReadFile(filepath.Join(tn.home, ".env"))
	require.NoError(t, err)
	writeFile(t, filepath.Join(tn.home, ".env"), string(env)+"LIFECYCLE_LOG="+logPath+"\n")
	// Only the operator may set plugins.isolation and the launcher.
	w.writeManaged("plugins:\n  isolation: " + mode + "\n  host:\n    launcher: env\n")
	return logPath
}

// lifecycleLines reads a lifecycle log, each line split in fields.
func lifecycleLines(t *testing.T, path string) [][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var out [][]string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" {
			out = append(out, strings.Fields(l))
		}
	}
	return out
}

// waitLine waits for a line of the log starting with want (the fields
// before the pid) and returns it.
func waitLine(t *testing.T, path string, want ...string) []string {
	t.Helper()
	var found []string
	require.Eventually(t, func() bool {
		for _, f := range lifecycleLines(t, path) {
			if len(f) > len(want) && strings.Join(f[:len(want)], " ") == strings.Join(want, " ") {
				found = f
				return true
			}
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, "no line %q in %s: %v", want, path, lifecycleLines(t, path))
	return found
}

func TestSessionStartAndEndHooksAndMemoryShutdownRunInTheProfilesHost(t *testing.T) {
	t.Parallel()
	w, alpha, beta := alphaBetaWorld(t)
	logA, logB := lifecycleTenant(t, w, alpha), lifecycleTenant(t, w, beta)
	s := w.startServe(nil)
	ca, cb, cb2 := s.dial(), s.dial(), s.dial()

	// session.create: start hook and memory init, in the profile's host,
	// as the new session, before the reply.
	sa, _ := ca.create("")
	sb, _ := cb.create("beta")
	sb2, _ := cb2.create("beta")
	for _, c := range []struct {
		log, sid, profile string
	}{{logA, sa, "default"}, {logB, sb, "beta"}, {logB, sb2, "beta"}} {
		f := waitLine(t, c.log, "start", c.sid, c.sid, "false", c.profile)
		require.NotEqual(t, strconv.Itoa(s.pid), f[5], "the start hook ran in the server")
		waitLine(t, c.log, "init", c.sid, c.sid)
	}
	require.Equal(t, "complete", ca.turn(sa, "a turn")["status"])
	require.Equal(t, "complete", cb.turn(sb, "a turn")["status"])

	// A new host initialises the live session again: the killed host took
	// its memory provider's state with it.
	first := waitLine(t, logA, "init", sa, sa)
	pid, err := strconv.Atoi(first[3])
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	require.Equal(t, "complete", ca.turn(sa, "after the host died")["status"])
	inits := 0
	for _, f := range lifecycleLines(t, logA) {
		if f[0] == "init" && f[1] == sa {
			inits++
			if inits == 2 {
				require.NotEqual(t, first[3], f[3], "the second init ran in the killed host")
			}
		}
	}
	require.Equal(t, 2, inits, "the session was initialised once per host")

	// session.close: end hook ("closed") and memory shutdown.
	ca.ok("session.close", map[string]any{"session_id": sa})
	waitLine(t, logA, "end", sa, sa, `"closed"`, "default")
	waitLine(t, logA, "shutdown", sa, sa)

	// The connection goes: its sessions end ("disconnected").
	cb2.closeConn()
	waitLine(t, logB, "end", sb2, sb2, `"disconnected"`, "beta")
	waitLine(t, logB, "shutdown", sb2, sb2)

	// session.resume starts the stored session again, as the new live id.
	stored := ca.ok("session.create", map[string]any{})["stored_session_id"].(string)
	ra := ca.ok("session.resume", map[string]any{"session_id": stored})["session_id"].(string)
	waitLine(t, logA, "start", ra, ra, "true", "default")

	// profiles.delete ends the profile's sessions before its host stops.
	op := s.dial()
	op.ok("profiles.delete", map[string]any{"name": "beta"})
	waitLine(t, logB, "end", sb, sb, `"profile`, `deleted"`, "beta")
	waitLine(t, logB, "shutdown", sb, sb)

	// The server's stop ends every live session.
	s.stop()
	waitLine(t, logA, "end", ra, ra, `"server`, `stopped"`, "default")
	waitLine(t, logA, "shutdown", ra, ra)

	// Each profile's log holds its own sessions only, and every line ran
	// as the session it names.
	own := map[string][]string{logA: {sa, ra}, logB: {sb, sb2}}
	foreign := map[string][]string{logA: {sb, sb2}, logB: {sa, ra}}
	for path, sids := range own {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		for _, sid := range foreign[path] {
			require.NotContains(t, string(b), sid, "%s holds another profile's session", path)
		}
		for _, f := range lifecycleLines(t, path) {
			require.Equal(t, f[1], f[2], "the %s call did not run as its session: %v", f[0], f)
		}
		for _, sid := range sids {
			require.Contains(t, string(b), "end "+sid, "%s: session %s never ended", path, sid)
		}
	}
}

// The seeded faults global-hooks and global-memory send every profile's
// session hooks, or memory calls, to the first profile's plugins.
func TestGlobalHooksAndMemoryFaultsCrossProfiles(t *testing.T) {
	t.Parallel()
	for fault, line := range map[string]string{"global-hooks": "start", "global-memory": "init"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			w, alpha, beta := alphaBetaWorld(t)
			logA, logB := lifecycleTenant(t, w, alpha), lifecycleTenant(t, w, beta)
			s := w.startServe(nil, "AGENTD_FAULTS="+fault, "AGENTD_ALLOW_FAULTS=1")
			ca, cb := s.dial(), s.dial()
			sa, _ := ca.create("")
			waitLine(t, logA, line, sa, sa)
			sb, _ := cb.create("beta")
			waitLine(t, logA, line, sb, sb) // beta's session, in alpha's host
			for _, f := range lifecycleLines(t, logB) {
				require.NotEqual(t, line, f[0], "with %s beta's own plugins still got %v", fault, f)
			}
			s.stop()
		})
	}
}

// In-process plugins get the same session hooks and memory calls, in the
// server's process.
func TestSessionHooksAndMemoryShutdownInProcess(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	alpha := w.addTenant("alpha", true)
	logA := lifecycleTenantIn(t, w, alpha, "in_process")
	s, c := w.serveDialed()
	sid, _ := c.create("")
	f := waitLine(t, logA, "start", sid, sid, "false", "default")
	require.Equal(t, strconv.Itoa(s.pid), f[5], "positive control: in_process runs in the server")
	require.Equal(t, "complete", c.turn(sid, "a turn")["status"])
	c.ok("session.close", map[string]any{"session_id": sid})
	waitLine(t, logA, "end", sid, sid, `"closed"`, "default")
	waitLine(t, logA, "shutdown", sid, sid)
	s.stop()
}

// A cron job's turn is a session of its own: its start and end hooks run
// too, the end saying the turn is done.
func TestCronJobSessionsStartAndEnd(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	alpha := w.addTenant("alpha", true)
	logA := lifecycleTenant(t, w, alpha)
	out, stderr, code := w.run("cron", "create", "--name", "j", "--prompt", "cron turn", "--every", "1h")
	require.Equal(t, 0, code, stderr)
	_, stderr, code = w.run("cron", "trigger", strings.TrimSpace(out))
	require.Equal(t, 0, code, stderr)
	_, stderr, code = w.run("cron", "tick")
	require.Equal(t, 0, code, stderr)
	lines := lifecycleLines(t, logA)
	require.NotEmpty(t, lines, "the cron job's session ran no hooks")
	start := waitLine(t, logA, "start")
	sid := start[1]
	require.Equal(t, sid, start[2], "the start hook ran as the job's session")
	waitLine(t, logA, "end", sid, sid, `"turn`, `done"`, "default")
	waitLine(t, logA, "shutdown", sid, sid)
}
