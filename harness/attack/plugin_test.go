package attack

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Positive controls of the plugin rows: the hostile plugin, interpreted as
// a host interprets it (unrestricted) and run unsandboxed as alpha, reads
// the neighbours' secrets, writes its canary into their SOUL.md and not its
// own, starts processes carrying its mark, and answers a ping.
func TestPluginRowsReachTheNeighboursUnsandboxed(t *testing.T) {
	w := newWorld(t)
	// The plugin reads $HOME as its host's environment has it: alpha's.
	t.Setenv("HOME", w.home["alpha"])
	dir := t.TempDir()
	require.NoError(t, WritePlugin(dir))
	tool, err := LoadPlugin(dir)
	require.NoError(t, err)
	require.Equal(t, PluginTool, tool.Name)
	call := func(c Call) string {
		t.Helper()
		require.Equal(t, PluginTool, c.Tool)
		out, err := tool.ContextHandler(context.Background(), roundTrip(t, c.Args))
		require.NoError(t, err)
		return out
	}
	rows := Plugin()
	out := call(row(t, rows, "plugin-sibling-homes").Call(Canaries{}))
	assert.Contains(t, out, w.secret["beta"])
	assert.Contains(t, out, w.secret["default"])
	assert.True(t, strings.HasSuffix(out, RowDone), out)

	canary := tenants.CanaryValue(HostileWriteKind, "alpha", "0123456789")
	call(row(t, rows, "plugin-write-soul").Call(Canaries{Write: canary}))
	for name, home := range w.home {
		soul, err := os.ReadFile(filepath.Join(home, "SOUL.md"))
		require.NoError(t, err)
		if name == "alpha" {
			assert.NotContains(t, string(soul), canary)
		} else {
			assert.Contains(t, string(soul), canary, name)
		}
	}

	mark := escapeMark(t)
	call(row(t, rows, "plugin-spawn").Call(Canaries{Mark: mark}))
	require.Eventually(t, func() bool { return len(procgroup.Carrying([]string{mark})) >= 2 }, 10*time.Second, 10*time.Millisecond,
		"the setsid'd process and the double fork carry the mark")

	assert.Contains(t, call(Ping()), "pong ")
	assert.Contains(t, call(pluginCall("hog", map[string]any{"mb": 32, "seconds": 0})), "hog done: 32 MiB held")
}

// roundTrip gives args the shape a tool call's arguments have after JSON
// (numbers as float64, lists as []any).
func roundTrip(t *testing.T, args map[string]any) map[string]any {
	t.Helper()
	c := Call{Tool: "x", Args: args}
	var back Call
	require.NoError(t, jsonRoundTrip(c, &back))
	return back.Args
}
