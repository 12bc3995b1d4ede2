package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness/dialecttest"
)

// framedFile writes the dialect server's second-transport target file
// (framed websocket first, then the chat; chat first with chatFirst).
func framedFile(t *testing.T, chatFirst bool, edits ...string) string {
	t.Helper()
	if chatFirst {
		swap, err := dialecttest.ChatFirst()
		require.NoError(t, err)
		edits = append(swap, edits...)
	}
	p, err := dialecttest.TargetFileOf(dialecttest.FramedFile, t.TempDir(), dialectServer(t), edits...)
	require.NoError(t, err)
	return p
}

// TestTargetCheckWalksEveryTransport: `target check` tries each declared
// transport in turn (connect, a session and a turn per tenant) and says
// which work; one that fails is a FAIL line, the next is still tried, and
// the exit is 2.
func TestTargetCheckWalksEveryTransport(t *testing.T) {
	t.Parallel()
	t.Run("both work", func(t *testing.T) {
		t.Parallel()
		code, out, errOut := runCLI(t, "target", "check", framedFile(t, false))
		require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
		for _, want := range []string{
			"transport          framed websocket /frames (1 of 2)", "ok    connect            2 framed websocket connections, each ready",
			"tool args in step.end.input",
			"transport          chat POST /v1/chat/completions (2 of 2)", "the agent by model dialect:{agent}",
			"ended with the chat stream's end, tool calls on the provider's side", "ok    stop", "the dry pass got through",
		} {
			assert.Contains(t, out, want)
		}
		assert.NotContains(t, out, "FAIL")
	})
	t.Run("a refused connect fails its transport only", func(t *testing.T) {
		t.Parallel()
		code, out, errOut := runCLI(t, "target", "check", "--wait", "20s", framedFile(t, false, `{token: "{token}"}`, `{token: "not-the-token"}`))
		require.Equal(t, 2, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
		assert.Contains(t, out, "FAIL  connect            connection for default over framed websocket /frames")
		assert.Contains(t, out, "connect: bad token")
		chat := out[strings.Index(out, "(2 of 2)"):]
		assert.Contains(t, chat, "ok    turn               alpha: ended with the chat stream's end", "the chat is still tried")
		assert.Contains(t, errOut, "1 of 2 transport(s) failed")
	})
	t.Run("stdio speaks the framed lines", func(t *testing.T) {
		t.Parallel()
		code, out, errOut := runCLI(t, "target", "check", framedFile(t, false, "serve: [", "# serve: ["))
		require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
		assert.Contains(t, out, "ok    connect            2 stdio backends, each ready")
		assert.Contains(t, out, "tool args in step.end.input")
	})
}

// TestCatalogAgainstDialectServerTransports certifies the dialect server's
// second transport from its target file alone, framed websocket first and
// chat first: what it can do passes, what the transport cannot say is
// skipped with the reason, and the leak switch is found through either.
func TestCatalogAgainstDialectServerTransports(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, chatFirst bool, catalog string, edits ...string) (int, string, string) {
		t.Helper()
		out := filepath.Join(t.TempDir(), "cert")
		code, _, stderr := runCLI(t, "--target", framedFile(t, chatFirst, edits...), "--tenants", "2", "--out", out, "--no-self-test", "--run", catalog)
		summary, err := os.ReadFile(filepath.Join(out, "summary.md"))
		require.NoError(t, err, stderr)
		return code, string(summary), stderr
	}
	for _, chat := range []bool{false, true} {
		name := map[bool]string{false: "framed", true: "chat"}[chat]
		t.Run(name+"/clean", func(t *testing.T) {
			t.Parallel()
			catalog, plugins := dialectCatalogHere(t)
			code, summary, stderr := run(t, chat, catalog)
			require.Equal(t, 0, code, "summary:\n%s\nstderr:\n%s", summary, stderr)
			wants := []string{
				"| profile-lifecycle | pass |", "| stdio-separate | pass |", "| concurrent-turns | pass |",
				"pooled-serve: the whole scenario: cron.create is unsupported by the target: dialectserver has no cron",
			}
			if plugins {
				wants = append(wants, "| plugin-hosts | pass |", "| hostile-plugin | pass |")
			}
			for _, want := range wants {
				assert.Contains(t, summary, want)
			}
			if chat {
				assert.Contains(t, summary, "chat transport's sessions are the harness's own")
			}
		})
		t.Run(name+"/leaking", func(t *testing.T) {
			t.Parallel()
			code, summary, _ := run(t, chat, dialectLeakCatalog, "files: true", "files: true\nenv: {DIALECT_LEAK: \"1\"}")
			require.Equal(t, 1, code, summary)
			assert.Contains(t, summary, "provider_key")
		})
	}
}
