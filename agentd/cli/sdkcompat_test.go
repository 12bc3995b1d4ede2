package cli_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
)

// A plugin written for v0.2.0 (host/testdata/v0.2.0/probe.go.txt: a tool,
// a hook and a memory provider without Shutdown, as that release's SDK
// declared it) works unchanged in agentd serve: its tool runs in the
// profile's host, its memory joins every turn's system prompt with its
// state kept between turns, and its sessions end without it.
func TestV020PluginWorksInServe(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join("..", "..", "host", "testdata", "v0.2.0", "probe.go.txt"))
	require.NoError(t, err)
	w := newWorld(t)
	alpha := w.addTenant("alpha", true)
	installPlugin(t, "probe", string(src), alpha)
	w.writeManaged("plugins:\n  isolation: host\n  host:\n    launcher: env\n")
	s, c := w.serveDialed()
	sid, _ := c.create("")
	require.Empty(t, errorEvents(c, sid), "the v0.2.0 plugin was reported as not loaded")

	alpha.srv.Enqueue(fakellm.ToolCall("pid", map[string]any{}), fakellm.Text("done"))
	require.Equal(t, "complete", c.turn(sid, "first")["status"])
	results := toolResults(alpha.srv)
	require.Len(t, results, 1)
	pid, err := strconv.Atoi(results[0])
	require.NoError(t, err, "the tool's result is not its host's pid: %q", results[0])
	require.NotEqual(t, s.pid, pid, "the tool ran in the server")

	alpha.srv.Enqueue(fakellm.Text("again"))
	require.Equal(t, "complete", c.turn(sid, "second")["status"])
	var systems []string
	for _, r := range alpha.srv.RequestsOf(fakellm.KindMain) {
		if msgs := r.Messages(); len(msgs) > 0 && msgs[0]["role"] == "system" {
			text, _ := msgs[0]["content"].(string)
			systems = append(systems, text)
		}
	}
	require.NotEmpty(t, systems)
	require.Contains(t, systems[0], "first:1", "the memory's prefetch is not in the first turn's prompt")
	require.Contains(t, systems[len(systems)-1], "second:2", "the memory's state was not kept in its host")

	c.ok("session.close", map[string]any{"session_id": sid})
	sid2, _ := c.create("")
	require.Empty(t, errorEvents(c, sid2))
	s.stop()
}
