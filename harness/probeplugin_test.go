package harness

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/tenants"
)

// A probe_plugin block is validated when the file loads: its folder, one
// way to install, its tools, and a reason for every ability it lacks.
func TestProbePluginValidates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "probe"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "probe", "run"), []byte("#!/bin/sh\n"), 0o755))
	base := "name: x\nstdio: [x]\nprobe_plugin:\n  name: p\n  source: \"{target_dir}/probe\"\n  tools: {probe: pr, hostile: ho}\n"
	load := func(extra string) error {
		path := filepath.Join(dir, "t.yaml")
		require.NoError(t, os.WriteFile(path, []byte(base+extra), 0o644))
		_, err := LoadTarget(path)
		return err
	}
	require.NoError(t, load("  install: {path: plugins/p, hostile_env: {SERVER_SWITCH: \"on\"}}\n  unsupported: {llm: none here}\nserver_files: [logs/, state.db*]\n"))
	for extra, want := range map[string]string{
		"  install: {path: plugins/p, hook: [cp]}\n":                                       "exactly one of path",
		"  install: {path: ../p}\n":                                                        "inside the tenant's home",
		"  install: {path: p}\n  unsupported: {teleport: no}\n":                            `unknown ability "teleport"`,
		"  install: {path: p}\n  unsupported: {llm: \" \"}\n":                              "unsupported.llm: give the reason",
		"  install: {path: p, config: {a: \"{nope}\"}}\n":                                  "unknown placeholder(s) {nope}",
		"  install: {path: p}\n  host_cmdline: \"(\"\n":                                    "host_cmdline",
		"  install: {path: p, hostile_env: {\"A-B\": x}}\n":                                `hostile_env: "A-B" is not a variable name`,
		"  install: {path: p, hostile_env: {AB: \"x\\ny\"}}\n":                             "hostile_env.AB: a value of one line",
		"  install: {path: p}\nserver_files: [/etc/x]\n":                                   "not a glob inside the launch home",
		"  install: {path: p}\ndialect: {methods: {plugins.install: {unsupported: no}}}\n": "drop one",
	} {
		err := load(extra)
		require.Error(t, err, extra)
		assert.Contains(t, err.Error(), want, extra)
	}
}

// The install copies the plugin's folder into the home (an executable
// stays one) and merges its config, {bwrap_launcher} filled or dropped;
// the hostile install also writes hostile_env into the tenant's .env,
// its own variables kept.
func TestInstallProbePlugin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join(dir, "probe")
	require.NoError(t, os.MkdirAll(filepath.Join(src, "lib"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "run"), []byte("#!/bin/sh\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "lib", "a.txt"), []byte("a"), 0o644))
	tg := echoTarget("sh", "-c", `echo "$AGENTD_HOME/profiles"`)
	tg.ProbePlugin = &ProbePlugin{Name: "p", Source: src, Tools: PluginTools{Probe: "pr", Hostile: "ho"},
		Install: PluginInstall{Path: "plugins/{tenant}", Config: map[string]any{"plugins": map[string]any{
			"enabled": []any{"p"}, "launcher": "{bwrap_launcher}"}}, HostileEnv: map[string]string{"SERVER_SWITCH": "off"}}}
	box, err := NewSandbox(t.Context(), filepath.Join(dir, "box"), tg, SandboxOptions{Tenants: tenants.Options{Names: []string{"default", "alpha"}, NoProviders: true}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = box.Close() })
	a, b := box.Set.Tenants[0], box.Set.Tenants[1]
	require.NoError(t, box.InstallProbePlugin(t.Context(), tg.ProbePlugin, a, map[string]any{BwrapLauncherVar: []any{"bwrap", "--x"}}))
	require.NoError(t, box.InstallHostilePlugin(t.Context(), tg.ProbePlugin, b, map[string]any{BwrapLauncherVar: ""}))
	st, err := os.Stat(filepath.Join(a.Home, "plugins", a.Name, "run"))
	require.NoError(t, err)
	assert.NotZero(t, st.Mode()&0o100, "the executable stays executable")
	got, err := os.ReadFile(filepath.Join(b.Home, "plugins", b.Name, "lib", "a.txt"))
	require.NoError(t, err)
	assert.Equal(t, "a", string(got))
	cfgA, err := os.ReadFile(filepath.Join(a.Home, "config.yaml"))
	require.NoError(t, err)
	assert.Contains(t, string(cfgA), "--x")
	cfgB, err := os.ReadFile(filepath.Join(b.Home, "config.yaml"))
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(cfgB), "enabled") && !strings.Contains(string(cfgB), "launcher"), "%s", cfgB)
	envA, err := os.ReadFile(filepath.Join(a.Home, ".env"))
	require.NoError(t, err)
	envB, err := os.ReadFile(filepath.Join(b.Home, ".env"))
	require.NoError(t, err)
	assert.NotContains(t, string(envA), "SERVER_SWITCH", "the probe install leaves .env as planted")
	assert.Contains(t, string(envB), "SERVER_SWITCH=off", "the hostile install writes hostile_env")
	assert.Contains(t, string(envB), b.ProviderKey(), "the tenant's own variables stay")
}

// Scenarios running at once share one target's probe plugin and routes
// and match their patterns together (CI's data race: IsHost compiled its
// pattern into the shared plugin on first use, as Succeeded did into a
// route).
func TestTargetPatternsMatchConcurrently(t *testing.T) {
	t.Parallel()
	p := &ProbePlugin{HostCmdline: `^dialectprobe( |$)`}
	bad := &ProbePlugin{HostCmdline: `(`}
	r := &Route{Success: `"choices"`}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			assert.True(t, p.IsHost("dialectprobe --tenant a"), "goroutine %d", i)
			assert.False(t, p.IsHost("agentd serve"), "goroutine %d", i)
			assert.False(t, bad.IsHost("("), "a pattern that does not compile matches nothing")
			assert.True(t, r.Succeeded(200, []byte(`{"choices":[]}`)), "goroutine %d", i)
			assert.False(t, r.Succeeded(200, []byte(`{"error":{}}`)), "goroutine %d", i)
		}()
	}
	wg.Wait()
	assert.False(t, (&ProbePlugin{}).IsHost("anything"), "no pattern, no host")
	assert.False(t, r.Succeeded(500, []byte(`{"choices":[]}`)), "a 5xx is no success")
}
