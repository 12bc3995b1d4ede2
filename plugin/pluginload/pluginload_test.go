package pluginload_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/plugin"
	"github.com/tenantcanary/tenantcanary/plugin/pluginload"
)

const probe = `package probe

import (
	"context"
	"os"
	"strconv"

	"github.com/tenantcanary/tenantcanary/plugin"
)

type mem struct{ level int }

func (m *mem) Name() string { return "memprobe" }
func (m *mem) IsAvailable(ctx context.Context) bool { return true }
func (m *mem) Initialize(ctx context.Context, s string) error { return nil }
func (m *mem) Prefetch(ctx context.Context, q string) (string, error) {
	m.level++
	return q + ":" + strconv.Itoa(m.level), nil
}
func (m *mem) SyncTurn(ctx context.Context, u, a string) error { return nil }
func (m *mem) Shutdown(ctx context.Context, s string) error { return nil }

func Register(ctx plugin.Context) error {
	if err := ctx.RegisterTool(plugin.Tool{Name: "pid", Handler: func(args map[string]any) (string, error) {
		return strconv.Itoa(os.Getpid()), nil
	}}); err != nil {
		return err
	}
	if err := ctx.RegisterHook("post_tool_call", func(c context.Context, p map[string]any) error { return nil }); err != nil {
		return err
	}
	return ctx.RegisterMemoryProvider(&mem{})
}
`

type recorder struct {
	plugin.Context
	tools []plugin.Tool
	hooks []plugin.Hook
	mems  []plugin.MemoryProvider
}

func (r *recorder) Name() string                     { return "probe" }
func (r *recorder) RegisterTool(t plugin.Tool) error { r.tools = append(r.tools, t); return nil }
func (r *recorder) RegisterHook(e string, h plugin.Hook) error {
	r.hooks = append(r.hooks, h)
	return nil
}
func (r *recorder) RegisterMemoryProvider(p plugin.MemoryProvider) error {
	r.mems = append(r.mems, p)
	return nil
}

func writePlugin(t testing.TB, src string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "probe")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "plugin.yaml"), []byte("name: probe\nversion: \"1\"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "probe.go"), []byte(src), 0o644))
	return dir
}

func TestLoadRegistersInterpretedValues(t *testing.T) {
	t.Parallel()
	r := &recorder{}
	require.NoError(t, pluginload.Load(writePlugin(t, probe), r, pluginload.Options{}))
	require.Len(t, r.tools, 1)
	out, err := r.tools[0].Handler(nil)
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(os.Getpid()), out)
	require.Len(t, r.hooks, 1)
	require.NoError(t, r.hooks[0](context.Background(), map[string]any{"tool_name": "x"}))
	require.Len(t, r.mems, 1)
	require.Equal(t, "memprobe", r.mems[0].Name())
	got, err := r.mems[0].Prefetch(context.Background(), "q")
	require.NoError(t, err)
	require.Equal(t, "q:1", got)
	got, _ = r.mems[0].Prefetch(context.Background(), "q")
	require.Equal(t, "q:2", got, "the provider's state is live, not a copy")
}

func TestLoadWithoutRegisterFails(t *testing.T) {
	t.Parallel()
	err := pluginload.Load(writePlugin(t, "package probe\n\nfunc Other() {}\n"), &recorder{}, pluginload.Options{})
	require.True(t, errors.Is(err, pluginload.ErrNoRegister), "got %v", err)
}

func TestFingerprintChangesWithContent(t *testing.T) {
	t.Parallel()
	dir := writePlugin(t, probe)
	a, err := pluginload.Fingerprint(dir)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "extra.txt"), []byte("x"), 0o644))
	b, err := pluginload.Fingerprint(dir)
	require.NoError(t, err)
	require.NotEqual(t, a, b)
}

func TestDiscoverFindsGeneralAndModelProviderPlugins(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	mk := func(rel, manifest string) {
		dir := filepath.Join(root, rel)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "plugin.yaml"), []byte(manifest), 0o644))
	}
	mk("zeta", "name: zeta\n")
	mk("alpha", "version: \"2\"\n") // no name: the folder's
	mk(filepath.Join(pluginload.ModelProvidersDir, "m1"), "name: m1\nkind: model-provider\n")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "not-a-plugin"), 0o755))

	found, err := pluginload.Discover(root, nil)
	require.NoError(t, err)
	var names, kinds []string
	for _, f := range found {
		names = append(names, f.Name)
		kinds = append(kinds, f.Kind)
	}
	require.Equal(t, []string{"alpha", "m1", "zeta"}, names)
	require.Equal(t, []string{pluginload.KindGeneral, pluginload.KindModelProvider, pluginload.KindGeneral}, kinds)

	found, err = pluginload.Discover(root, []string{"zeta"})
	require.NoError(t, err)
	require.Len(t, found, 1)
	require.Equal(t, "zeta", found[0].Name)

	found, err = pluginload.Discover(filepath.Join(root, "missing"), nil)
	require.NoError(t, err)
	require.Empty(t, found)

	mk("bad", "name: bad\nkind: daemon\n")
	_, err = pluginload.Discover(root, nil)
	require.ErrorContains(t, err, `unknown kind "daemon"`)
}

func TestRestrictedLoadTurnsExitIntoAnError(t *testing.T) {
	t.Parallel()
	src := "package probe\n\nimport (\n\t\"os\"\n\n\t\"github.com/tenantcanary/tenantcanary/plugin\"\n)\n\nfunc Register(ctx plugin.Context) error {\n\tos.Exit(4)\n\treturn nil\n}\n"
	err := pluginload.Load(writePlugin(t, src), &recorder{}, pluginload.Options{})
	require.ErrorContains(t, err, "os.Exit(4)")
}

// TestRestrictedPluginSeesOnlyItsEnvironment: a restricted plugin that
// imports os (and not fmt, so its interpreter is given only the packages
// it imports) reads its own environment, never the process's.
func TestRestrictedPluginSeesOnlyItsEnvironment(t *testing.T) {
	t.Setenv("TENANTCANARY_PROCESS_ONLY", "process-secret")
	src := `package probe

import (
	"os"
	"sort"
	"strings"

	"github.com/tenantcanary/tenantcanary/plugin"
)

func Register(ctx plugin.Context) error {
	return ctx.RegisterTool(plugin.Tool{Name: "env", Handler: func(args map[string]any) (string, error) {
		env := os.Environ()
		sort.Strings(env)
		return os.Getenv("TENANTCANARY_PROCESS_ONLY") + "|" + strings.Join(env, ","), nil
	}})
}
`
	r := &recorder{}
	require.NoError(t, pluginload.Load(writePlugin(t, src), r, pluginload.Options{Env: []string{"OWN=1"}}))
	require.Len(t, r.tools, 1)
	out, err := r.tools[0].Handler(nil)
	require.NoError(t, err)
	require.Equal(t, "|OWN=1", out)
}
