package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/homefs"
	"github.com/tenantcanary/tenantcanary/host"
	"github.com/tenantcanary/tenantcanary/isolation"
	"github.com/tenantcanary/tenantcanary/plugin/pluginload"
)

// The in-process loader is the positive control for "absent from the
// server": the same plugin leaves its marker under this process's pid.
func TestInProcessLoaderRunsPluginsHere(t *testing.T) {
	t.Parallel()
	home := probeHome(t)
	srv := &server{}
	l, err := host.LoadInProcess(host.InProcessConfig{
		Profile: "p", Mode: isolation.InProcess, PluginsDir: filepath.Join(home, "plugins"),
		Backend: srv, Env: []string{"PROBE_MARKER_DIR=" + home},
	})
	require.NoError(t, err)
	defer l.Close()
	srv.loader = l
	require.True(t, markerExists(home, "loaded-hostprobe", os.Getpid()))

	ctx := context.Background()
	out, err := l.Call(ctx, "s1", "hostprobe_pid", nil)
	require.NoError(t, err)
	require.Contains(t, out, fmt.Sprintf(`"pid":%d`, os.Getpid()))
	out, err = l.Call(ctx, "sess-x", "hostprobe_whoami", nil)
	require.NoError(t, err)
	require.Equal(t, `{"inner":{"session":"sess-x"},"session":"sess-x"}`, out)
	require.NoError(t, l.Hook(ctx, "s1", "post_tool_call", map[string]any{"tool_name": "grep"}))
	out, err = l.Call(ctx, "s1", "hostprobe_pid", nil)
	require.NoError(t, err)
	require.Contains(t, out, "grep")
	painter, err := l.ImageGenProvider(ctx, "hostpainter")
	require.NoError(t, err)
	img, err := painter.Generate(ctx, "cat", nil)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("cat@%d", os.Getpid()), img["image"])

	// In-process the boundary does not apply: the platform plugin loads.
	require.Empty(t, statusOf(t, l, "platformprobe").Error)
	// In-process os.Exit is restricted: it costs an error, not the server.
	_, err = l.Call(ctx, "s1", "hostprobe_crash", nil)
	require.ErrorIs(t, err, host.ErrPlugin)
	require.Contains(t, err.Error(), "os.Exit(3)")
}

func TestManagedPinWinsOverTheProfilesInProcess(t *testing.T) {
	t.Parallel()
	home := probeHome(t)
	managed := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(home, "config.yaml"), []byte("plugins:\n  enabled: [hostprobe]\n  isolation: in_process\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(managed, "config.yaml"), []byte("plugins:\n  isolation: host\n"), 0o644))
	s, err := isolation.LoadSettings(home, managed)
	require.NoError(t, err)
	require.Equal(t, isolation.Host, s.Mode)

	// The in-process path asks first and refuses, running no plugin code.
	_, err = host.LoadInProcess(host.InProcessConfig{Profile: "p", Mode: s.Mode, PluginsDir: filepath.Join(home, "plugins"), Backend: &server{}})
	require.ErrorIs(t, err, isolation.ErrRefused)
	require.Contains(t, err.Error(), "would run inside the server process")
	require.False(t, markerExists(home, "loaded-hostprobe", os.Getpid()))

	e := newEnv(t, home, func(c *host.Config) { c.Enabled = []string{"hostprobe"} })
	v := e.call("s", "hostprobe_pid", nil)
	require.NotEqual(t, os.Getpid(), pidOf(v))
	require.False(t, markerExists(home, "loaded-hostprobe", os.Getpid()))
	ps, err := e.m.Plugins(context.Background())
	require.NoError(t, err)
	require.Len(t, ps, 1, "plugins.enabled keeps only hostprobe")
}

// The corpus: each plugin's audit verdict and findings equal what the host
// runtime reports for it, and a blocked plugin fails with the audit's reason.
var corpus = map[string]string{
	"c_portable": `func Register(ctx plugin.Context) error {
	return ctx.RegisterTool(plugin.Tool{Name: "c_portable_t", Handler: func(args map[string]any) (string, error) { return "", nil }})
}`,
	"c_platform": `func Register(ctx plugin.Context) error {
	return ctx.RegisterPlatform("x", "X", func(cfg map[string]any) (any, error) { return nil, nil })
}`,
	"c_handler": `func Register(ctx plugin.Context) error {
	_ = ctx.RegisterPlatformHandler("slack", func(client any) (any, error) { return nil, nil })
	return nil
}`,
	"c_cli": `func Register(ctx plugin.Context) error {
	return ctx.RegisterCLICommand("hello", "says hello", func(args []string) int { return 0 })
}`,
	"c_degraded": `func Register(ctx plugin.Context) error {
	return ctx.RegisterHook("pre_gateway_dispatch", func(c context.Context, p map[string]any) error { return nil })
}`,
	"c_facades": `func Register(ctx plugin.Context) error {
	st, llm := ctx.State(), ctx.LLM()
	return ctx.RegisterTool(plugin.Tool{Name: "c_facades_t", ContextHandler: func(c context.Context, args map[string]any) (string, error) {
		if err := st.Set(c, "k", "v"); err != nil {
			return "", err
		}
		return llm.Complete(c, "hi")
	}})
}`,
	"c_memory": `type m struct{}

func (m) Name() string                                 { return "c_mem" }
func (m) IsAvailable(ctx context.Context) bool          { return true }
func (m) Initialize(ctx context.Context, s string) error { return nil }
func (m) Prefetch(ctx context.Context, q string) (string, error) { return q, nil }
func (m) SyncTurn(ctx context.Context, u, a string) error { return nil }
func (m) Shutdown(ctx context.Context, s string) error { return nil }

func Register(ctx plugin.Context) error {
	ctx.RegisterHook("post_tool_call", func(c context.Context, p map[string]any) error { return nil })
	return ctx.RegisterMemoryProvider(m{})
}`,
}

func TestAuditAndRuntimeAgreeOnACorpus(t *testing.T) {
	t.Parallel()
	home := newHome(t)
	for name, body := range corpus {
		src := "package " + name + "\n\nimport (\n\t\"context\"\n\n\t\"github.com/tenantcanary/tenantcanary/plugin\"\n)\n\nvar _ = context.Background\n\n" + body + "\n"
		writePlugin(t, home, name, "name: "+name+"\n", src)
	}
	e := newEnv(t, home, nil)
	ps, err := e.m.Plugins(context.Background())
	require.NoError(t, err)
	e.seePID()
	require.Len(t, ps, len(corpus))
	verdicts := map[isolation.Verdict]int{}
	for _, st := range ps {
		rep, err := isolation.AuditDir(st.Dir)
		require.NoError(t, err)
		verdicts[rep.Verdict]++
		require.Equal(t, rep.Verdict, st.Verdict, "plugin %s: audit and runtime disagree", st.Name)
		require.Equal(t, rep.Findings, st.Findings, "plugin %s: audit and runtime disagree", st.Name)
		blocked := false
		for _, f := range rep.Findings {
			if f.Effect == isolation.Unsupported {
				blocked = true
				require.Contains(t, st.Error, f.Reason, "plugin %s fails with the table's reason", st.Name)
			}
		}
		if !blocked {
			require.Empty(t, st.Error, "plugin %s", st.Name)
		}
	}
	// Every verdict is exercised, so the agreement is not vacuous.
	require.Equal(t, map[isolation.Verdict]int{isolation.VerdictPortable: 1, isolation.VerdictHost: 3, isolation.VerdictInProcess: 3}, verdicts)

	out, err := e.m.Call(context.Background(), "s", "c_facades_t", nil)
	require.NoError(t, err)
	require.Equal(t, "completed:hi", out)
	require.Equal(t, "v", e.srv.state["s"]["k"])
	require.Contains(t, statusOf(t, e.m, "c_cli").Warnings[0], "RegisterCLICommand skipped")
	require.Contains(t, statusOf(t, e.m, "c_degraded").Warnings[0], "pre_gateway_dispatch")
}

const degradedPlugin = `package degraded

import (
	"context"
	"fmt"

	"github.com/tenantcanary/tenantcanary/plugin"
)

var got []string

func Register(ctx plugin.Context) error {
	if err := ctx.RegisterHook("pre_gateway_dispatch", func(c context.Context, p map[string]any) error {
		got = append(got, fmt.Sprint(p["runner"]), fmt.Sprint(p["text"]))
		return nil
	}); err != nil {
		return err
	}
	return ctx.RegisterTool(plugin.Tool{Name: "degraded_got", Handler: func(args map[string]any) (string, error) {
		return fmt.Sprint(got), nil
	}})
}
`

func TestDegradedHookGetsPlaceholdersForLiveHandles(t *testing.T) {
	t.Parallel()
	home := newHome(t)
	writePlugin(t, home, "degraded", "name: degraded\n", degradedPlugin)
	e := newEnv(t, home, nil)
	live := make(chan int) // not plain data
	require.NoError(t, e.m.Hook(context.Background(), "s", "pre_gateway_dispatch", map[string]any{"runner": live, "text": "hello"}))
	out, err := e.m.Call(context.Background(), "s", "degraded_got", nil)
	require.NoError(t, err)
	e.seePID()
	require.Equal(t, "["+isolation.HostPlaceholder+" hello]", out)
}

const modelPlugin = `package hostmodel

import (
	"context"
	"os"

	"github.com/tenantcanary/tenantcanary/plugin"
)

type hm struct{}

func (hm) Profile() plugin.ModelProfile {
	return plugin.ModelProfile{Name: "hostmodel", BaseURL: "https://hostmodel.example/v1", EnvVars: []string{"HOSTMODEL_KEY"}}
}

func (hm) BuildExtraBody(ctx context.Context, sessionID string) (map[string]any, error) {
	return map[string]any{"pid": os.Getpid(), "session_id": sessionID, "key_seen": os.Getenv("HOSTMODEL_KEY") != ""}, nil
}

func Register(ctx plugin.Context) error {
	if os.Getenv("HOSTMODEL_KEY") != "" {
		if err := os.WriteFile("key-seen-at-register", nil, 0o600); err != nil {
			return err
		}
	}
	return ctx.RegisterModelProvider(hm{})
}
`

func TestModelProviderDataIsCachedAndMethodsRunInTheHost(t *testing.T) {
	t.Parallel()
	home := newHome(t)
	dir := writePlugin(t, home, filepath.Join(pluginload.ModelProvidersDir, "hostmodel"), "name: hostmodel\nkind: model-provider\n", modelPlugin)
	e := newEnv(t, home, func(c *host.Config) { c.Env = append(c.Env, "HOSTMODEL_KEY=sk-secret") })
	ctx := context.Background()

	mps, err := e.m.ModelProviders(ctx)
	require.NoError(t, err)
	require.Len(t, mps, 1)
	p := mps[0].Profile()
	require.Equal(t, "https://hostmodel.example/v1", p.BaseURL)
	require.Equal(t, []string{"HOSTMODEL_KEY"}, p.EnvVars)
	// Discovery started no host, and the extraction child had no credentials.
	require.Zero(t, e.m.Generation())
	_, err = os.Stat(filepath.Join(home, "key-seen-at-register"))
	require.True(t, os.IsNotExist(err), "the extraction child saw the profile's key")
	cache, err := host.ModelCachePath(home, pluginload.Found{Manifest: pluginload.Manifest{Name: "hostmodel"}, Dir: dir})
	require.NoError(t, err)
	b, err := os.ReadFile(cache)
	require.NoError(t, err)
	require.Contains(t, string(b), "hostmodel.example")

	// A second discovery reads the cache: no child at all.
	require.NoError(t, os.WriteFile(cache, []byte(`{"profiles":[{"name":"hostmodel","base_url":"https://cached.example/v1"}]}`), 0o600))
	mps, err = e.m.ModelProviders(ctx)
	require.NoError(t, err)
	require.Equal(t, "https://cached.example/v1", mps[0].Profile().BaseURL)

	// Methods run in the host, with the profile's environment.
	body, err := mps[0].BuildExtraBody(ctx, "s1")
	require.NoError(t, err)
	e.seePID()
	require.Equal(t, "s1", body["session_id"])
	require.Equal(t, float64(e.m.PID()), body["pid"])
	require.NotEqual(t, float64(os.Getpid()), body["pid"])
	require.Equal(t, true, body["key_seen"])
	_ = json.Valid
}

// The model-provider cache lives in the profile's home, which its tenant
// can write: a cache folder replaced by a link to another home is refused
// (homefs.ErrLinkOut, naming the file), and nothing is read from or
// written there. With FollowLinks (agentd's seeded fault
// home-follows-links) the link is followed: the cache entry, which
// carries what the plugin registered, is written into the other home (the
// positive control of the link-cache chain).
func TestModelCacheLinkedOutIsRefused(t *testing.T) {
	t.Parallel()
	for _, seeded := range []bool{false, true} {
		t.Run(fmt.Sprintf("fault=%v", seeded), func(t *testing.T) {
			t.Parallel()
			home, other := newHome(t), newHome(t)
			writePlugin(t, home, filepath.Join(pluginload.ModelProvidersDir, "hostmodel"), "name: hostmodel\nkind: model-provider\n", modelPlugin)
			require.NoError(t, os.Symlink(other, filepath.Join(home, "cache")))
			e := newEnv(t, home, func(c *host.Config) { c.FollowLinks = seeded })
			mps, err := e.m.ModelProviders(context.Background())
			var written []string
			require.NoError(t, filepath.WalkDir(other, func(p string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					written = append(written, p)
				}
				return err
			}))
			if !seeded {
				require.ErrorIs(t, err, homefs.ErrLinkOut)
				require.ErrorContains(t, err, "home file "+host.ModelCacheDir)
				require.Empty(t, mps)
				require.Empty(t, written, "nothing written in the other home")
				return
			}
			require.NoError(t, err)
			require.Len(t, mps, 1)
			require.Len(t, written, 1, "the cache entry went through the link")
			b, err := os.ReadFile(written[0])
			require.NoError(t, err)
			require.Contains(t, string(b), "hostmodel.example")
			require.True(t, strings.HasPrefix(written[0], filepath.Join(other, "plugin_host", "model-providers")), written[0])
		})
	}
}

func TestLauncherPrefixWrapsTheHost(t *testing.T) {
	t.Parallel()
	e := newEnv(t, probeHome(t), func(c *host.Config) {
		c.Command = append([]string{"env", "LAUNCHED_BY=test-runner"}, c.Command...)
	})
	v := e.call("s", "hostprobe_env", nil)
	require.Contains(t, v["env"], "LAUNCHED_BY=test-runner")
}
