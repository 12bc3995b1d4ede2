package host_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/plugin"
)

// testdata/v0.2.0 holds plugins exactly as v0.2.0's tests wrote them
// (host/testdata/memprobe.go.txt and the probe of
// plugin/pluginload/pluginload_test.go at the commit that made v0.2.0):
// memory providers without Shutdown, which v0.3.0's SDK refused ("cannot
// use type *mem as type plugin.MemoryProvider"). They must load and work,
// unchanged, in a real plugin host.
func TestPluginsWrittenForV020LoadAndWorkInTheHost(t *testing.T) {
	t.Parallel()
	ctx := plugin.WithSession(context.Background(), "s1")

	t.Run("tool, hook and memory", func(t *testing.T) {
		t.Parallel()
		home := newHome(t)
		writePlugin(t, home, "probe", "name: probe\nversion: \"1\"\n", readTestdata(t, "v0.2.0/probe.go.txt"))
		e := newEnv(t, home, nil)

		st := statusOf(t, e.m, "probe")
		require.Empty(t, st.Error, "the v0.2.0 plugin did not load")
		require.Len(t, st.Tools, 1)

		out, err := e.m.Call(ctx, "s1", "pid", nil)
		require.NoError(t, err)
		e.seePID()
		require.Equal(t, strconv.Itoa(e.m.PID()), out, "the tool ran in the host")
		require.NotEqual(t, strconv.Itoa(os.Getpid()), out)
		require.NoError(t, e.m.Hook(ctx, "s1", "post_tool_call", map[string]any{"tool_name": "pid"}))

		mem, err := e.m.MemoryProvider(ctx, "memprobe")
		require.NoError(t, err)
		require.True(t, mem.IsAvailable(ctx))
		require.NoError(t, mem.Initialize(ctx, "s1"))
		got, err := mem.Prefetch(ctx, "q")
		require.NoError(t, err)
		require.Equal(t, "q:1", got)
		got, err = mem.Prefetch(ctx, "q")
		require.NoError(t, err)
		require.Equal(t, "q:2", got, "the provider's state lives in the host")
		require.NoError(t, mem.SyncTurn(ctx, "u", "a"))

		// The server ends sessions through the optional interface: the
		// host skips a provider that has no Shutdown.
		sd, ok := mem.(plugin.Shutdowner)
		require.True(t, ok, "a hosted provider's proxy is a plugin.Shutdowner")
		require.NoError(t, sd.Shutdown(ctx, "s1"))
	})

	t.Run("memory with a config schema", func(t *testing.T) {
		t.Parallel()
		home := newHome(t)
		writePlugin(t, home, "memprobe", "name: memprobe\n", readTestdata(t, "v0.2.0/memprobe.go.txt"))
		e := newEnv(t, home, nil)

		mem, err := e.m.MemoryProvider(ctx, "memprobe")
		require.NoError(t, err)
		got, err := mem.Prefetch(ctx, "q")
		require.NoError(t, err)
		e.seePID()
		require.Equal(t, fmt.Sprintf("%d:1", e.m.PID()), got)
		schema, err := e.m.ConfigSchema(ctx, "memprobe")
		require.NoError(t, err)
		require.Equal(t, float64(e.m.PID()), schema["pid"])
		require.NoError(t, mem.(plugin.Shutdowner).Shutdown(ctx, "s1"))
	})
}

// A provider that has Shutdown (the SDK of v0.3.0 to v0.6.0 required it)
// still gets it, through the interpreter's composed wrapper, in the host.
func TestHostedProviderShutdownReachesThePlugin(t *testing.T) {
	t.Parallel()
	home := newHome(t)
	writePlugin(t, home, "shutprobe", "name: shutprobe\n", shutdownProbe)
	e := newEnv(t, home, nil)
	ctx := plugin.WithSession(context.Background(), "s9")

	mem, err := e.m.MemoryProvider(ctx, "shutprobe")
	require.NoError(t, err)
	got, err := mem.Prefetch(ctx, "")
	require.NoError(t, err)
	require.Equal(t, "", got, "positive control: nothing shut down yet")
	require.NoError(t, mem.(plugin.Shutdowner).Shutdown(ctx, "s9"))
	got, err = mem.Prefetch(ctx, "")
	require.NoError(t, err)
	require.Equal(t, "shut down s9", got)
}

const shutdownProbe = `package shutprobe

import (
	"context"

	"github.com/tenantcanary/tenantcanary/plugin"
)

type mem struct{ last string }

func (m *mem) Name() string                                    { return "shutprobe" }
func (m *mem) IsAvailable(ctx context.Context) bool            { return true }
func (m *mem) Initialize(ctx context.Context, s string) error  { return nil }
func (m *mem) Prefetch(ctx context.Context, q string) (string, error) { return m.last, nil }
func (m *mem) SyncTurn(ctx context.Context, u, a string) error { return nil }
func (m *mem) Shutdown(ctx context.Context, s string) error {
	m.last = "shut down " + s
	return nil
}

var _ plugin.Shutdowner = (*mem)(nil)

func Register(ctx plugin.Context) error { return ctx.RegisterMemoryProvider(&mem{}) }
`
