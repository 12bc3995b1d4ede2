package pluginload_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/traefik/yaegi/interp"
	"github.com/traefik/yaegi/stdlib"

	"github.com/tenantcanary/tenantcanary/plugin"
	"github.com/tenantcanary/tenantcanary/plugin/pluginload"
)

// v020Probe is a plugin exactly as v0.2.0's tests wrote it: a memory
// provider with no Shutdown (kept in host/testdata/v0.2.0, where the host
// tests run it in a real plugin host).
func v020Probe(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "host", "testdata", "v0.2.0", "probe.go.txt"))
	require.NoError(t, err)
	return string(b)
}

// memoryV06 is plugin.MemoryProvider as v0.3.0 to v0.6.0 declared it, with
// Shutdown required; contextV06 is the part of that SDK's Context the
// v0.2.0 probe uses.
type memoryV06 interface {
	plugin.MemoryProvider
	Shutdown(ctx context.Context, sessionID string) error
}

type contextV06 interface {
	Name() string
	RegisterTool(tool plugin.Tool) error
	RegisterHook(event string, hook plugin.Hook) error
	RegisterMemoryProvider(p memoryV06) error
}

// The break this package's composed wrappers undo, reproduced: against an
// SDK whose MemoryProvider requires Shutdown, the v0.2.0 plugin does not
// even compile; against today's it loads, and a provider without Shutdown
// is no plugin.Shutdowner.
func TestV020MemoryProviderLoadsWhereV06RefusedIt(t *testing.T) {
	t.Parallel()
	src := v020Probe(t)

	// Positive control: v0.6.0's SDK shape refuses it.
	old := map[string]reflect.Value{}
	for k, v := range pluginload.Symbols["github.com/tenantcanary/tenantcanary/plugin/plugin"] {
		old[k] = v
	}
	old["Context"] = reflect.ValueOf((*contextV06)(nil))
	old["MemoryProvider"] = reflect.ValueOf((*memoryV06)(nil))
	i := interp.New(interp.Options{})
	require.NoError(t, i.Use(stdlib.Symbols))
	require.NoError(t, i.Use(interp.Exports{"github.com/tenantcanary/tenantcanary/plugin/plugin": old}))
	_, err := i.Eval(src)
	require.Error(t, err, "positive control: the v0.6.0 SDK shape accepted a provider without Shutdown")
	require.Contains(t, err.Error(), "cannot use")

	r := &recorder{}
	require.NoError(t, pluginload.Load(writePlugin(t, src), r, pluginload.Options{}))
	require.Len(t, r.mems, 1)
	_, isShutdowner := r.mems[0].(plugin.Shutdowner)
	require.False(t, isShutdowner, "a provider without Shutdown passed as a plugin.Shutdowner")
	got, err := r.mems[0].Prefetch(context.Background(), "q")
	require.NoError(t, err)
	require.Equal(t, "q:1", got)
}

// A provider with Shutdown (written for v0.3.0 to v0.6.0) keeps it on the
// server's side: the interpreter wraps it in the composed wrapper.
func TestInterpretedShutdownSurvivesAsAnOptionalInterface(t *testing.T) {
	t.Parallel()
	for name, recv := range map[string]string{"pointer receiver": "*mem", "value receiver": "mem"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			src := `package probe

import (
	"context"

	"github.com/tenantcanary/tenantcanary/plugin"
)

var ended = map[string]bool{}

type mem struct{}

func (m RECV) Name() string                                    { return "m" }
func (m RECV) IsAvailable(ctx context.Context) bool            { return true }
func (m RECV) Initialize(ctx context.Context, s string) error  { return nil }
func (m RECV) Prefetch(ctx context.Context, q string) (string, error) {
	if ended[q] {
		return "ended " + q, nil
	}
	return "", nil
}
func (m RECV) SyncTurn(ctx context.Context, u, a string) error { return nil }
func (m RECV) Shutdown(ctx context.Context, s string) error    { ended[s] = true; return nil }

func Register(ctx plugin.Context) error { return ctx.RegisterMemoryProvider(VALUE) }
`
			value := "&mem{}"
			if recv == "mem" {
				value = "mem{}"
			}
			src = strings.NewReplacer("RECV", recv, "VALUE", value).Replace(src)
			r := &recorder{}
			require.NoError(t, pluginload.Load(writePlugin(t, src), r, pluginload.Options{}))
			require.Len(t, r.mems, 1)
			sd, ok := r.mems[0].(plugin.Shutdowner)
			require.True(t, ok, "the provider's Shutdown was lost at the boundary")
			ctx := context.Background()
			got, err := r.mems[0].Prefetch(ctx, "s1")
			require.NoError(t, err)
			require.Equal(t, "", got)
			require.NoError(t, sd.Shutdown(ctx, "s1"))
			got, err = r.mems[0].Prefetch(ctx, "s1")
			require.NoError(t, err)
			require.Equal(t, "ended s1", got, "Shutdown reached the plugin's own method")
		})
	}
}
