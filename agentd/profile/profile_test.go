package profile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/isolation"
)

func testHomes(t testing.TB) Homes {
	t.Helper()
	root := t.TempDir()
	h, err := Resolve(func(k string) string {
		return map[string]string{"HOME": root, "AGENTD_MANAGED_DIR": filepath.Join(root, "managed")}[k]
	})
	require.NoError(t, err)
	require.Equal(t, filepath.Join(root, ".agentd"), h.Launch)
	return h
}

// testProfile is testHomes with one profile ready: the launch profile
// for name "", else the profile name, created.
func testProfile(t testing.TB, name string) (Homes, Profile) {
	t.Helper()
	h := testHomes(t)
	get := h.Create
	if name == "" {
		get = h.Get
	}
	p, err := get(name)
	require.NoError(t, err)
	return h, p
}

func write(t testing.TB, path, text string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
}

func TestResolve(t *testing.T) {
	t.Parallel()
	h, err := Resolve(func(k string) string { return map[string]string{"AGENTD_HOME": "/x/home"}[k] })
	require.NoError(t, err)
	require.Equal(t, Homes{Launch: "/x/home", Managed: DefaultManagedDir}, h)
	require.Equal(t, "/x/home/profiles", h.Root())
	_, err = Resolve(func(string) string { return "" })
	require.ErrorContains(t, err, "neither AGENTD_HOME nor HOME")
}

func TestProfileLifecycle(t *testing.T) {
	t.Parallel()
	h := testHomes(t)
	_, err := h.Get("work")
	require.ErrorIs(t, err, ErrUnknownProfile)
	_, err = h.Create("Bad/Name")
	require.ErrorIs(t, err, ErrBadName)
	_, err = h.Create(LaunchName)
	require.ErrorIs(t, err, ErrProfileExists)

	p, err := h.Create("work")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(h.Root(), "work"), p.Home)
	for _, f := range []string{"config.yaml", ".env", "SOUL.md", "memories/MEMORY.md"} {
		require.FileExists(t, p.File(f))
	}
	for _, d := range []string{"logs", "cron/output", "plugins"} {
		require.DirExists(t, p.File(d))
	}
	_, err = h.Create("work")
	require.ErrorIs(t, err, ErrProfileExists)

	list, err := h.List()
	require.NoError(t, err)
	require.Equal(t, []string{LaunchName, "work"}, names(list))

	require.Error(t, h.Delete(LaunchName))
	require.NoError(t, h.Delete("work"))
	require.NoDirExists(t, p.Home)
	require.ErrorIs(t, h.Delete("work"), ErrUnknownProfile)
}

func names(ps []Profile) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func TestConfigManagedScopeWins(t *testing.T) {
	t.Parallel()
	h, p := testProfile(t, "")
	write(t, p.File("config.yaml"), `
model:
  base_url: http://own/v1
  default: own-model
  key_env: OWN_KEY
plugins:
  isolation: in_process
terminal:
  cwd: /work/own
agent:
  api_max_retries: 5
`)
	write(t, filepath.Join(h.Managed, "config.yaml"), "plugins:\n  isolation: host\n  host:\n    launcher: [bwrap, --die-with-parent]\n")
	cfg, err := p.LoadConfig()
	require.NoError(t, err)
	require.Equal(t, "host", cfg.Plugins.Isolation, "the managed pin wins")
	require.Equal(t, isolation.Argv{"bwrap", "--die-with-parent"}, cfg.Plugins.Host.Launcher)
	require.Equal(t, "own-model", cfg.Model.Default, "keys the managed scope does not set stay the profile's")
	require.Equal(t, "OWN_KEY", cfg.Model.KeyEnv)
	require.Equal(t, "/work/own", cfg.Terminal.Cwd)
	require.Equal(t, 5, cfg.MaxRetries())
	require.True(t, cfg.MemoryEnabled())

	require.NoError(t, p.SetConfig("terminal.cwd", "/work/new"))
	cfg, err = p.LoadConfig()
	require.NoError(t, err)
	require.Equal(t, "/work/new", cfg.Terminal.Cwd)
	require.Equal(t, "own-model", cfg.Model.Default)
	managed, err := os.ReadFile(filepath.Join(h.Managed, "config.yaml"))
	require.NoError(t, err)
	require.NotContains(t, string(managed), "/work/new", "writes never touch the managed scope")
}

func TestConfigDefaultsAndErrors(t *testing.T) {
	t.Parallel()
	h, p := testProfile(t, "")
	cfg, err := p.LoadConfig()
	require.NoError(t, err)
	require.Equal(t, p.Home, cfg.Terminal.Cwd)
	require.Equal(t, 2, cfg.MaxRetries())

	write(t, p.File("config.yaml"), "model:\n  default: x\n   bad: indent\n")
	_, err = p.LoadConfig()
	require.ErrorIs(t, err, ErrBadConfig)
	require.ErrorContains(t, err, p.File("config.yaml"))
	require.ErrorContains(t, err, "line 3")

	write(t, p.File("config.yaml"), "agent:\n  api_max_retries: lots\n")
	_, err = p.LoadConfig()
	require.ErrorIs(t, err, ErrBadConfig)
	require.ErrorContains(t, err, "line 2")
	require.Error(t, p.SetConfig("model.default", "y"), "a broken config is reported, never overwritten")

	write(t, p.File("config.yaml"), "")
	write(t, filepath.Join(h.Managed, "config.yaml"), "- not a mapping\n")
	_, err = p.LoadConfig()
	require.ErrorIs(t, err, ErrBadConfig)
	require.ErrorContains(t, err, filepath.Join(h.Managed, "config.yaml"))
}

// A config read again is parsed from what the file holds now, and every
// read's map is the caller's own: changing it changes no later read, even
// of the same bytes (the parses parseYAMLMap keeps are never handed out).
func TestConfigReadsAreFreshAndTheCallersOwn(t *testing.T) {
	t.Parallel()
	_, p := testProfile(t, "")
	write(t, p.File("config.yaml"), "model:\n  default: first\n")
	own, _, err := p.OwnConfig()
	require.NoError(t, err)
	own["model"].(map[string]any)["default"] = "changed by a caller"
	own["extra"] = true
	again, _, err := p.OwnConfig()
	require.NoError(t, err)
	require.Equal(t, map[string]any{"model": map[string]any{"default": "first"}}, again)
	write(t, p.File("config.yaml"), "model:\n  default: second\n")
	cfg, err := p.LoadConfig()
	require.NoError(t, err)
	require.Equal(t, "second", cfg.Model.Default, "a changed file is parsed anew")
	write(t, p.File("config.yaml"), "model:\n  default: first\n")
	cfg, err = p.LoadConfig()
	require.NoError(t, err)
	require.Equal(t, "first", cfg.Model.Default)
	// The same bytes in another file are that file's: an error names it.
	other := filepath.Join(t.TempDir(), "config.yaml")
	for _, path := range []string{p.File("config.yaml"), other} {
		_, err := parseYAMLMap(path, []byte("- not a mapping\n"))
		require.ErrorIs(t, err, ErrBadConfig)
		require.ErrorContains(t, err, path)
	}
}

func TestPluginsLauncherIsAStringOrAListInEitherScope(t *testing.T) {
	t.Parallel()
	h, p := testProfile(t, "")
	p.OwnOperatorKeys = true // the launch profile of a single-tenant agentd tui
	write(t, p.File("config.yaml"), "plugins:\n  host:\n    launcher: \"bwrap --ro-bind / / --setenv X 'a b'\"\n")
	cfg, err := p.LoadConfig()
	require.NoError(t, err, "a launcher string in the profile scope")
	require.Equal(t, isolation.Argv{"bwrap", "--ro-bind", "/", "/", "--setenv", "X", "a b"}, cfg.Plugins.Host.Launcher)

	write(t, filepath.Join(h.Managed, "config.yaml"), "plugins:\n  host:\n    launcher: runner -q\n")
	cfg, err = p.LoadConfig()
	require.NoError(t, err, "a launcher string in the operator scope")
	require.Equal(t, isolation.Argv{"runner", "-q"}, cfg.Plugins.Host.Launcher, "the operator's wins")

	write(t, filepath.Join(h.Managed, "config.yaml"), "plugins:\n  host:\n    launcher: [runner, -x y]\n")
	cfg, err = p.LoadConfig()
	require.NoError(t, err)
	require.Equal(t, isolation.Argv{"runner", "-x y"}, cfg.Plugins.Host.Launcher, "a list is taken as it is")

	write(t, filepath.Join(h.Managed, "config.yaml"), "plugins:\n  host:\n    launcher: \"runner 'open\"\n")
	_, err = p.LoadConfig()
	require.ErrorIs(t, err, ErrBadConfig)
	require.ErrorContains(t, err, "never closed")
}

func TestMergeIsDeepAndPure(t *testing.T) {
	t.Parallel()
	base := map[string]any{"a": map[string]any{"x": 1, "y": 2}, "b": 1}
	over := map[string]any{"a": map[string]any{"y": 3}, "c": 4}
	got := Merge(base, over)
	require.Equal(t, map[string]any{"a": map[string]any{"x": 1, "y": 3}, "b": 1, "c": 4}, got)
	require.Equal(t, 2, base["a"].(map[string]any)["y"], "inputs untouched")
}

func TestParseEnv(t *testing.T) {
	t.Parallel()
	env, err := ParseEnv(".env", []byte(`# comment
PLAIN=value # trailing comment
export EXPORTED=yes
SINGLE='literal \n $HOME' # comment
DOUBLE="line\nnext \"q\" \\ \$x"
EMPTY=
HASH=a#b
PLAIN=second
  SPACED = padded  
`))
	require.NoError(t, err)
	m := env.Map()
	require.Equal(t, "second", m["PLAIN"], "a later definition wins")
	require.Equal(t, "yes", m["EXPORTED"])
	require.Equal(t, `literal \n $HOME`, m["SINGLE"])
	require.Equal(t, "line\nnext \"q\" \\ $x", m["DOUBLE"])
	require.Equal(t, "", m["EMPTY"])
	require.Equal(t, "a#b", m["HASH"])
	require.Equal(t, "padded", m["SPACED"])
	require.Equal(t, "PLAIN", env[0].Name, "file order kept")

	for _, bad := range []string{"NOEQUALS", "1BAD=x", "Q=\"open", "S='open", "Q=\"x\" junk", "export"} {
		_, err := ParseEnv("/h/.env", []byte("OK=1\n"+bad+"\n"))
		require.ErrorIs(t, err, ErrBadEnv, bad)
		require.ErrorContains(t, err, "/h/.env:2", bad)
	}
}

func TestSetEnvRoundTrips(t *testing.T) {
	t.Parallel()
	_, p := testProfile(t, "")
	write(t, p.File(".env"), "# keep me\nA=1\nB=2\nA=3\n")
	for _, v := range []string{"simple", "with space", `quote"s and 'single' $HOME \ back`, "new\nline"} {
		require.NoError(t, p.SetEnv("A", v))
		env, err := p.LoadEnv()
		require.NoError(t, err)
		got, _ := env.Lookup("A")
		require.Equal(t, v, got)
		b, _ := env.Lookup("B")
		require.Equal(t, "2", b)
	}
	require.NoError(t, p.SetEnv("NEW_API_KEY", "sk-1"))
	data, err := os.ReadFile(p.File(".env"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(data), "# keep me\n"))
	require.Contains(t, string(data), "NEW_API_KEY=sk-1\n")
	st, err := os.Stat(p.File(".env"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	write(t, p.File(".env"), "broken line\n")
	err = p.SetEnv("A", "x")
	require.ErrorIs(t, err, ErrBadEnv)
	data, _ = os.ReadFile(p.File(".env"))
	require.Equal(t, "broken line\n", string(data), "a broken .env is never overwritten")
	require.True(t, errors.Is(err, ErrBadEnv))
}

func TestToolEnvScrubsThenLayers(t *testing.T) {
	t.Parallel()
	p := Profile{Name: "a", Home: "/h/a"}
	base := []string{"PATH=/bin", "LANG=C", "OPENAI_API_KEY=leak", "GITHUB_TOKEN=leak", "AGENTD_HOME=/launch",
		"TENANT_PROVIDER_KEY=leak", "MY_SECRET=leak", "HOME=/real", "AWS_REGION=x", "SHARED=base"}
	env := Env{{"TENANT_PROVIDER_KEY", "own"}, {"SHARED", "profile"}, {"MARK", "m"}}
	got := ToolEnv(base, p, env)
	require.Equal(t, []string{"AGENTD_HOME=/h/a", "HOME=/h/a", "LANG=C", "MARK=m", "PATH=/bin", "SHARED=profile", "TENANT_PROVIDER_KEY=own"}, got)
}

// BenchmarkLoadConfig is one read of a profile's config with a managed
// scope: what a turn does several times over (its scope, sandbox, workdir
// and plugins each read the files).
func BenchmarkLoadConfig(b *testing.B) {
	h, p := testProfile(b, "")
	write(b, p.File("config.yaml"), "model:\n  provider: openai\n  default: m\n  base_url: http://own/v1\nterminal:\n  cwd: /work/own\nmemory:\n  memory_enabled: true\nplugins:\n  enabled: [a, b]\n")
	write(b, filepath.Join(h.Managed, "config.yaml"), "plugins:\n  isolation: host\n  host:\n    launcher: [bwrap, --die-with-parent]\nterminal:\n  sandbox: auto\n")
	for b.Loop() {
		if _, err := p.LoadConfig(); err != nil {
			b.Fatal(err)
		}
	}
}
