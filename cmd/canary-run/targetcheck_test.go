package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
	"github.com/tenantcanary/tenantcanary/harness/dialecttest"
)

// TestTargetCheck runs `canary-run target check` against
// harness/testdata/dialectserver, a server speaking another dialect than
// agentd: its own target file passes, and files with one thing wrong get a
// diagnosis naming it.
func TestTargetCheck(t *testing.T) {
	t.Parallel()
	bin := dialectServer(t)
	file := func(t *testing.T, edits ...string) string {
		p, err := dialecttest.TargetFile(t.TempDir(), bin, edits...)
		require.NoError(t, err)
		return p
	}
	t.Run("good file passes", func(t *testing.T) {
		t.Parallel()
		code, out, errOut := runCLI(t, "target", "check", file(t))
		require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
		for _, want := range []string{"ok    ready line", "ok    health", "ok    connect", "ok    session.create",
			"ok    turn", "tool args in step.end.input", "ok    stop", "the dry pass got through"} {
			assert.Contains(t, out, want)
		}
		assert.NotContains(t, out, "FAIL")
		assert.NotContains(t, out, "warn")
	})
	t.Run("a leak on the way is a warning and exit 1", func(t *testing.T) {
		t.Parallel()
		code, out, errOut := runCLI(t, "target", "check", file(t, "files: true", "files: true\nenv: {DIALECT_LEAK: launch-env}"))
		require.Equal(t, 1, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
		for _, want := range []string{
			"warn  session.create     session of alpha reports default's model",
			"(launch_bleed)",
			"warn  turn               of alpha failed, and its provider got requests carrying default's provider key",
			"ok    turn               default:", "ok    stop", "the server leaked on the way",
		} {
			assert.Contains(t, out, want)
		}
		assert.NotContains(t, out, "FAIL")
	})
	t.Run("a failing preflight stops the pass with its output", func(t *testing.T) {
		t.Parallel()
		code, out, _ := runCLI(t, "target", "check", file(t, "files: true",
			"files: true\npreflight: [sh, -c, 'echo no sandbox works here; exit 1']"))
		require.Equal(t, 2, code, out)
		assert.Contains(t, out, "FAIL  preflight")
		assert.Contains(t, out, "no sandbox works here")
		assert.NotContains(t, out, "ok    ready line", "nothing was started")
	})
	t.Run("a passing preflight is a step", func(t *testing.T) {
		t.Parallel()
		code, out, errOut := runCLI(t, "target", "check", file(t, "files: true",
			"files: true\npreflight: [sh, -c, 'echo checked; echo all good']"))
		require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
		assert.Contains(t, out, "ok    preflight          sh -c echo checked; echo all good: all good")
	})
	t.Run("stdio backend, no ready event", func(t *testing.T) {
		t.Parallel()
		code, out, errOut := runCLI(t, "target", "check", file(t,
			"serve: [", "# serve: [",
			"files: true", "files: true\nenv: {DIALECT_QUIET: \"1\"}",
			"ready: hello", "no_ready: true"))
		require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
		assert.Contains(t, out, "ok    connect            2 stdio backends")
		assert.NotContains(t, out, "ok    health")
	})
	// Diagnoses: each edit breaks the file one way, and the pass fails
	// (exit 2) naming what broke.
	for _, tc := range []struct {
		name         string
		flags, edits []string
		want         []string
	}{
		{"wrong method name gets the -32601 diagnosis", nil, []string{"method: open", "method: opne"},
			[]string{"FAIL  session.create", `does not know method "opne"`, "-32601", "dialect.methods.session.create"}},
		{"wrong event name: the turn never ends", nil, []string{"status_ok: ok", "status_ok: complete"},
			[]string{"FAIL  turn", "reply.done"}},
		// The wait is the whole turn's, and the diagnosis names what came
		// instead (reply.done) only once the turn has ended: long enough
		// for a turn on a loaded machine.
		{"an event that never came", []string{"--wait", "20s"}, []string{"turn_end: reply.done", "turn_end: reply.finished"},
			[]string{"FAIL  turn", "waiting for the end of the turn of session", "reply.finished", "reply.done x1" /* what came instead */}},
		{"ready line never matched shows the last lines", nil, []string{"--port, \"0\"]", "--prot, \"0\"]"},
			[]string{"FAIL  ready line", "usage: dialectserver"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append(append([]string{"target", "check"}, tc.flags...), file(t, tc.edits...))
			code, out, _ := runCLI(t, args...)
			require.Equal(t, 2, code, out)
			for _, want := range tc.want {
				assert.Contains(t, out, want)
			}
		})
	}
	t.Run("invalid file", func(t *testing.T) {
		t.Parallel()
		p := writeFile(t, t.TempDir(), "bad.yaml", "name: x\nstdio: [a]\ndialect: {methods: {session.open: x}}\n")
		code, out, _ := runCLI(t, "target", "check", p)
		require.Equal(t, 2, code)
		assert.Contains(t, out, `unknown operation "session.open"`)
	})
	t.Run("help and usage", func(t *testing.T) {
		t.Parallel()
		code, out, _ := runCLI(t, "target", "--help")
		require.Equal(t, 0, code)
		assert.Contains(t, out, "canary-run target check")
		code, _, errOut := runCLI(t, "target", "chek", "x")
		require.Equal(t, 2, code)
		assert.Contains(t, errOut, "want the subcommand check")
	})
}

// dialectCatalog is the catalog but hostile-tools and noisy-neighbour: the
// dialect server speaks another protocol and isolates its profiles' data,
// but runs its tools unsandboxed and without limits, so those two rightly
// find leaks and starvation in it (what they find is tested against agentd).
const dialectCatalog = `^(stdio-separate|pooled-serve|concurrent-turns|settings-writes|profile-lifecycle|restart-resume|gateway|shell-reuse|plugin-hosts|tenant-authz|profile-recreate|hostile-plugin)$`

// dialectLeakCatalog is what a leaking dialect server's run needs to show
// its leak: DIALECT_LEAK=1 puts the launch profile's .env into every
// answer to a named profile, and these scenarios' first turns get one.
// The clean runs cover the whole dialectCatalog.
const dialectLeakCatalog = `^(stdio-separate|concurrent-turns)$`

// dialectCatalogHere is dialectCatalog where bubblewrap runs. The dialect
// server confines its plugin hosts with it (its target file declares them
// confined), so elsewhere (a machine without bubblewrap, or whose kernel
// refuses it user namespaces) plugin-hosts and hostile-plugin are left
// out, said in the log: plugins reports whether they run.
func dialectCatalogHere(t *testing.T) (catalog string, plugins bool) {
	t.Helper()
	if err := sandbox.Available(sandbox.Bwrap); err != nil {
		t.Logf("plugin-hosts and hostile-plugin left out: the dialect server confines its plugin hosts with bubblewrap, which cannot run here: %v", err)
		return strings.NewReplacer("|plugin-hosts", "", "|hostile-plugin", "").Replace(dialectCatalog), false
	}
	return dialectCatalog, true
}

// TestCatalogAgainstDialectServer runs the catalog (dialectCatalog) through
// a target file against the dialect server: what it can do passes, what it
// declares unsupported is skipped with its reason, and the certificate names
// the declared behaviour. The same server told to leak gets exit 1.
func TestCatalogAgainstDialectServer(t *testing.T) {
	t.Parallel()
	bin := dialectServer(t)
	run := func(t *testing.T, catalog string, edits ...string) (int, string, string) {
		t.Helper()
		file, err := dialecttest.TargetFile(t.TempDir(), bin, edits...)
		require.NoError(t, err)
		out := filepath.Join(t.TempDir(), "cert")
		code, _, stderr := runCLI(t, "--target", file, "--tenants", "2", "--out", out, "--no-self-test", "--run", catalog)
		summary, err := os.ReadFile(filepath.Join(out, "summary.md"))
		require.NoError(t, err, stderr)
		return code, string(summary), stderr
	}
	t.Run("clean", func(t *testing.T) {
		t.Parallel()
		catalog, plugins := dialectCatalogHere(t)
		code, summary, stderr := run(t, catalog)
		require.Equal(t, 0, code, "summary:\n%s\nstderr:\n%s", summary, stderr)
		wants := []string{
			"Declared behaviours (each judged as declared): unknown_profile: fallback_to_launch;",
			"| profile-lifecycle | pass |", "| stdio-separate | pass |",
			"pooled-serve: the whole scenario: cron.create is unsupported by the target: dialectserver has no cron",
		}
		if plugins {
			// Its own probe plugin (an executable speaking JSON lines).
			wants = append(wants, "| plugin-hosts | pass |", "| hostile-plugin | pass |", "dialectserver gives plugins no LLM facade")
		}
		for _, want := range wants {
			assert.Contains(t, summary, want)
		}
	})
	t.Run("leaking", func(t *testing.T) {
		t.Parallel()
		code, summary, _ := run(t, dialectLeakCatalog, "files: true", "files: true\nenv: {DIALECT_LEAK: \"1\"}")
		require.Equal(t, 1, code, summary)
		assert.Contains(t, summary, "provider_key")
	})
}

// TestTargetCheckSharedConfig: the dialect server's shared-config file
// (one operator config with a section per agent, state apart from the
// homes) gets through the dry pass from the file alone.
func TestTargetCheckSharedConfig(t *testing.T) {
	t.Parallel()
	bin := dialectServer(t)
	file, err := dialecttest.TargetFileOf(dialecttest.SharedFile, t.TempDir(), bin)
	require.NoError(t, err)
	code, out, errOut := runCLI(t, "target", "check", file)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	for _, want := range []string{"ok    shared config", "/operator/dialect.yaml: 2 section(s) per tenant", "ok    session.create", "ok    turn", "the dry pass got through"} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "FAIL")
	assert.NotContains(t, out, "warn")
}
