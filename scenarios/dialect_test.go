package scenarios

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/dialecttest"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

var (
	dialectOnce sync.Once
	dialectBin  string
	dialectErr  error
)

// dialectTarget is harness/testdata/dialectserver's target (built once per
// package run), with edits applied to its file.
func dialectTarget(t *testing.T, edits ...string) harness.Target {
	t.Helper()
	dialectOnce.Do(func() {
		// The binary outlives any one test: it goes next to agentd's,
		// removed by TestMain.
		dialectBin, dialectErr = dialecttest.Build(context.Background(), filepathDir(agentdBin))
	})
	require.NoError(t, dialectErr)
	tg, err := dialecttest.Target(t.TempDir(), dialectBin, edits...)
	require.NoError(t, err)
	return tg
}

// writeDialect writes the dialect server's target file with edits, for a
// test that loads it itself.
func writeDialect(t *testing.T, edits ...string) string {
	t.Helper()
	dialectTarget(t) // the binary
	path, err := dialecttest.TargetFile(t.TempDir(), dialectBin, edits...)
	require.NoError(t, err)
	return path
}

func filepathDir(p string) string { return p[:strings.LastIndex(p, "/")] }

// dialectProbeSpec drives the dialect server as the pooled scenario does and
// checks, from inside, what only the dialect makes true: the tool arguments
// come from the completion event, each session's first turn made a keyless
// metadata probe to its own provider, and an unknown profile's session is
// the launch tenant's.
func dialectProbeSpec() Spec {
	return Spec{
		ID:        "dialect-probe",
		Purpose:   "the dialect server's turns, tool events, metadata probes and fallback",
		Backends:  []harness.Backend{harness.BackendServe},
		Snapshots: perTenant(2),
		Timeout:   2 * time.Minute,
		Phases: []Phase{
			serveTurnPhase(),
			{Name: "dialect", Run: func(e *Env) {
				for _, t := range e.Tenants {
					c, sid := e.Conns[t.Name], e.Sessions[t.Name].SessionID
					if got := e.Sessions[t.Name].Info.Model; got != t.Model() {
						e.T.Errorf("session of %s reports model %q, want %q (result mapping meta.model)", t.Name, got, t.Model())
					}
					calls := c.ToolCalls(sid, 0)
					if len(calls) != 1 || calls[0].Name != "exec" || !strings.Contains(calls[0].Args["cmd"].(string), tenants.ProbeBegin) {
						e.T.Errorf("tool calls of %s from step.end: %+v, want one exec{cmd: the probe}", t.Name, calls)
					}
					probes := 0
					for _, r := range t.Requests() {
						if r.Method == "GET" && strings.HasSuffix(r.Path, "/props") && r.Auth == "" {
							probes++
						}
					}
					if probes != 1 {
						e.T.Errorf("%s's provider recorded %d keyless GET .../props probes, want 1", t.Name, probes)
					}
				}
				e.UnknownProfile(e.Conns[e.Launch().Name], "nosuchprofile")
			}},
			{Name: "by-profile", Run: func(e *Env) {
				// config.set cwd by profile is the by_profile hook, run in
				// the profile's home; by session it is unsupported.
				for _, t := range e.Tenants {
					c := e.Conns[t.Name]
					dir, err := t.MintWorkdir()
					require.NoError(e.T, err)
					e.ScopedWrite("config.set cwd by profile", t, []string{"config.yaml"}, func() {
						e.Call(c, "config.set", map[string]any{"profile": t.Name, "key": "cwd", "value": dir}, nil)
					})
					cfg, err := os.ReadFile(filepath.Join(t.Home, "config.yaml"))
					require.NoError(e.T, err)
					if !strings.Contains(string(cfg), dir) {
						e.T.Errorf("config.set cwd by profile %s: its config.yaml does not hold %s:\n%s", t.Name, dir, cfg)
					}
					ctx, cancel := e.ctx(10 * time.Second)
					err = c.Call(ctx, "config.set", map[string]any{"session_id": e.Sessions[t.Name].SessionID, "key": "cwd", "value": dir}, nil)
					cancel()
					var uerr *harness.UnsupportedError
					if !errors.As(err, &uerr) || uerr.Op != "config.set.cwd" {
						e.T.Errorf("config.set cwd by session of %s: got %v, want it unsupported", t.Name, err)
					}
				}
				// The next turn runs in the new cwd.
				e.InterleavedTurns(1)
				for _, t := range e.Tenants {
					dirs := t.Workdirs()
					if want := "CWD=" + dirs[len(dirs)-1] + "\n"; !strings.Contains(e.lastSnapshot(t)+"\n", want) {
						e.T.Errorf("%s: the turn after config.set cwd by profile did not run in %s", t.Name, dirs[len(dirs)-1])
					}
				}
			}},
		},
	}
}

// serveTurnPhase starts the serve backend, connects each tenant, opens its
// session and runs a turn each.
func serveTurnPhase() Phase {
	return Phase{Name: "connect", Run: func(e *Env) {
		e.serveSessions(1)
	}}
}

// runCatalogDialect runs the catalog's scenario id against target
// (runDialect) and requires its result to be want.
func runCatalogDialect(t *testing.T, id string, target harness.Target, want Result) *Report {
	t.Helper()
	spec, err := Default().Get(id)
	require.NoError(t, err)
	return runDialectWant(t, spec, target, want)
}

// runDialectWant runs spec against target (runDialect) and requires its
// result to be want.
func runDialectWant(t *testing.T, spec Spec, target harness.Target, want Result) *Report {
	t.Helper()
	rep, out := runDialect(t, spec, target)
	require.Equal(t, want, rep.Result, "%s\nlog:\n%s", rep.Reason, strings.Join(out.Log, "\n"))
	return rep
}

// runDialect runs spec against target in a standalone T (so a finding is
// the report's, not this test's failure) and returns its report.
func runDialect(t *testing.T, spec Spec, target harness.Target) (*Report, harness.Outcome) {
	t.Helper()
	rep := &Report{}
	out := harness.RunStandalone(t.Context(), spec.ID, t.TempDir(), false, func(st harness.T) {
		runInto(st, spec, Config{Target: target, Tenants: 2}, rep)
	})
	return rep, out
}

func TestDialectServerPassesClean(t *testing.T) {
	t.Parallel()
	rep, out := runDialect(t, dialectProbeSpec(), dialectTarget(t))
	requireClean(t, rep, out)
}

// requireClean fails unless rep passed with no finding and every positive
// control held (the scans saw each tenant's own canaries), at least one.
func requireClean(t *testing.T, rep *Report, out harness.Outcome) {
	t.Helper()
	require.Equal(t, Pass, rep.Result, "log:\n%s", strings.Join(out.Log, "\n"))
	require.Empty(t, rep.Findings())
	held := 0
	for _, ph := range rep.Phases {
		for _, c := range ph.Controls {
			require.True(t, c.Passed, "control %+v", c)
			held++
		}
	}
	require.Positive(t, held)
}

func TestDialectServerLeakIsFound(t *testing.T) {
	t.Parallel()
	tg := dialectTarget(t)
	tg.Env = map[string]string{"DIALECT_LEAK": "1"}
	rep, out := runDialect(t, dialectProbeSpec(), tg)
	requireLeak(t, rep, out, invariants.RPC, "default", tenants.ProviderKey)
}

// TestDialectServerWithAFixedPort: a server that refuses --port 0 and
// prints no port in its ready line is given a free port as {port} and
// waited on through its health check: it passes clean, and its leak
// switch is still caught through it.
func TestDialectServerWithAFixedPort(t *testing.T) {
	t.Parallel()
	edits := []string{`serve, --host, "{host}", --port, "0"]`, `serve, --host, "{host}", --port, "{port}"]`,
		`ready_line: 'DIALECT READY port=(\d+)'`, `ready_line: 'DIALECT READY'`}
	tg := dialectTarget(t, edits...)
	require.True(t, tg.PicksPort(tg.Serve), "the harness picks the port")
	tg.Env = map[string]string{"DIALECT_PORT": "fixed"}
	rep, out := runDialect(t, dialectProbeSpec(), tg)
	requireClean(t, rep, out)

	leaky := dialectTarget(t, edits...)
	leaky.Env = map[string]string{"DIALECT_PORT": "fixed", "DIALECT_LEAK": "1"}
	rep, out = runDialect(t, dialectProbeSpec(), leaky)
	requireLeak(t, rep, out, invariants.RPC, "default", tenants.ProviderKey)

	// The controls: the server in this mode refuses port 0, and a ready
	// line that names no port, for a command that takes none, is refused
	// when the file loads.
	cmd := exec.CommandContext(t.Context(), dialectBin, "serve", "--host", "127.0.0.1", "--port", "0")
	cmd.Env = []string{"DIALECT_PORT=fixed", "DIALECT_TOKEN=t", "DIALECT_HOME=" + t.TempDir()}
	msg, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(msg), "takes a fixed port")
	_, err = harness.LoadTarget(writeDialect(t, `ready_line: 'DIALECT READY port=(\d+)'`, `ready_line: 'DIALECT READY'`))
	require.ErrorContains(t, err, "give the port to the command as {port}")
}

// TestDialectServerWithIdempotencyKeys: a server that refuses a say
// without a key of its own gets {unique} (a fresh value per call) and
// passes clean, its leak caught through it; the control: a fixed key is
// refused from the second turn on.
func TestDialectServerWithIdempotencyKeys(t *testing.T) {
	t.Parallel()
	say := `params: {sid: "{session_id}", message: "{text}"}`
	tg := dialectTarget(t, say, `params: {sid: "{session_id}", message: "{text}", idem: "{unique}"}`)
	tg.Env = map[string]string{"DIALECT_IDEMPOTENCY": "1"}
	rep, out := runDialect(t, dialectProbeSpec(), tg)
	requireClean(t, rep, out)

	leaky := dialectTarget(t, say, `params: {sid: "{session_id}", message: "{text}", idem: "{unique}"}`)
	leaky.Env = map[string]string{"DIALECT_IDEMPOTENCY": "1", "DIALECT_LEAK": "1"}
	rep, out = runDialect(t, dialectProbeSpec(), leaky)
	requireLeak(t, rep, out, invariants.RPC, "default", tenants.ProviderKey)

	fixed := dialectTarget(t, say, `params: {sid: "{session_id}", message: "{text}", idem: "same-key"}`)
	fixed.Env = map[string]string{"DIALECT_IDEMPOTENCY": "1"}
	rep, out = runDialect(t, dialectProbeSpec(), fixed)
	require.NotEqual(t, Pass, rep.Result)
	require.Contains(t, strings.Join(out.Log, "\n"), "already used", "the control: a key repeated is refused")
}

func TestDialectProfileLifecycleThroughHooks(t *testing.T) {
	t.Parallel()
	runCatalogDialect(t, "profile-lifecycle", dialectTarget(t), Pass)
}

func TestDialectUnsupportedSkipsWithReason(t *testing.T) {
	t.Parallel()
	rep := runCatalogDialect(t, "pooled-serve", dialectTarget(t), Skipped)
	require.Contains(t, rep.Reason, "dialectserver has no cron")
}

func TestDialectDeclaredErrorIsJudged(t *testing.T) {
	t.Parallel()
	// The server falls back; a file declaring "error" must fail the
	// unknown-profile judgement.
	tg := dialectTarget(t, "unknown_profile: fallback_to_launch", "unknown_profile: error")
	rep, out := runDialect(t, dialectProbeSpec(), tg)
	require.Equal(t, Failed, rep.Result)
	require.Contains(t, strings.Join(out.Log, "\n"), "want an error reply")
}

func TestDialectStdioSeparate(t *testing.T) {
	t.Parallel()
	runCatalogDialect(t, "stdio-separate", dialectTarget(t), Pass)
}
