package harness

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/tenantcanary/tenantcanary/tenants"
)

// The shared config's fields are checked when the file loads, each
// problem naming its field.
func TestLoadTargetSharedConfigNamesEveryProblem(t *testing.T) {
	t.Parallel()
	requireLoadFails(t, `
tool_env: shared_config
layout: {state_root: /var/lib/x, state_dir: agents, state_db: ../x.db}
shared_config:
  path: /etc/x.yaml
  format: toml
  base: {a: "{home}"}
  sections:
    - {at: "agents.", key: fixed, template: {m: "{modle}"}}
    - {at: providers, template: {}}
`,
		"tool_env: shared_config needs a shared_config section whose template holds {env}",
		`layout.state_root "/var/lib/x"`, `layout.state_dir "agents"`, `layout.state_db "../x.db"`,
		`shared_config.path "/etc/x.yaml"`, `shared_config.format "toml"`, "shared_config.base: unknown placeholder(s) {home}",
		`shared_config.sections[0].at "agents."`, "shared_config.sections[0].template: unknown placeholder(s) {modle}",
		`shared_config.sections[0].key "fixed"`, "shared_config.sections[1].template: empty",
	)
	requireLoadFails(t, "tool_env: shell\n", `tool_env "shell": want dotenv, shared_config or none`)
}

// The harness writes one shared config with every tenant's sections (a
// mapping by key, a list), each from its template, and rewrites it when a
// profile's home is written or the profile is deleted; a tenant's state
// folder lies under the state root.
func TestSandboxWritesTheSharedConfig(t *testing.T) {
	t.Parallel()
	tg := echoTarget("sh", "-c", `echo "$AGENTD_HOME/profiles"`)
	tg.ToolEnv = ToolEnvShared
	tg.Layout.StateRoot, tg.Layout.StateDir = "{root}/state", "agents/{profile}"
	tg.SharedConfig = &SharedConfig{
		Path: "{root}/operator/gateway.json",
		Base: map[string]any{"gateway": map[string]any{"log": "{root}/logs/gw.log"}, "agents": map[string]any{"defaults": map[string]any{"x": 1}}},
		Sections: []SharedSection{
			{At: "agents.list", Template: map[string]any{"id": "{profile}", "default": "{launch}", "dir": "{state}", "env": "{env}", "model": "t-{tenant}/{model}"}},
			{At: "models.providers", Key: "t-{tenant}", Template: map[string]any{"baseUrl": "{base_url}", "apiKey": "{provider_key}"}},
		},
	}
	box, err := NewSandbox(context.Background(), t.TempDir(), tg, SandboxOptions{Tenants: tenants.Options{Names: []string{"default", "alpha"}, NoProviders: true}})
	require.NoError(t, err)
	defer func() { require.NoError(t, box.Close()) }()
	path := filepath.Join(box.Root, "operator", "gateway.json")
	require.Equal(t, path, box.SharedConfigPath())
	assert.DirExists(t, filepath.Join(box.Root, "state"), "the state root is made; the folders in it are the target's")

	type doc struct {
		Gateway map[string]any
		Agents  struct {
			Defaults map[string]any
			List     []map[string]any
		}
		Models struct{ Providers map[string]map[string]any }
	}
	read := func() doc {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		var d doc
		require.NoError(t, json.Unmarshal(data, &d), string(data))
		return d
	}
	d := read()
	assert.Equal(t, filepath.Join(box.Root, "logs", "gw.log"), d.Gateway["log"])
	assert.Equal(t, map[string]any{"x": 1.0}, d.Agents.Defaults)
	require.Len(t, d.Agents.List, 2)
	def, alpha := box.Set.Get("default"), box.Set.Get("alpha")
	assert.Equal(t, filepath.Join(box.Root, "state", "agents", "alpha"), alpha.State)
	assert.Equal(t, map[string]any{"id": "default", "default": true, "dir": def.State, "model": "t-default/" + def.Model(), "env": map[string]any{
		"TENANT_PROVIDER_KEY": def.ProviderKey(), "API_SERVER_KEY": def.APIServerKey(), "TENANT_MARKER": def.Value(tenants.EnvMarker),
		def.Value(tenants.EnvName): def.Value(tenants.EnvMarker)}}, d.Agents.List[0])
	assert.Equal(t, "alpha", d.Agents.List[1]["id"])
	assert.Equal(t, false, d.Agents.List[1]["default"])
	// No providers here: an empty sole placeholder drops its key, as in dialect.config.
	assert.Equal(t, map[string]any{"apiKey": alpha.ProviderKey()}, d.Models.Providers["t-alpha"])

	// A profile made mid-run gets its sections once its home is written,
	// with the extra variables it was written with; a deleted one loses
	// them.
	g, err := box.Set.AddTenant("gamma")
	require.NoError(t, err)
	assert.Len(t, read().Agents.List, 2, "no section before its home is written")
	require.NoError(t, box.WriteHome(g, tenants.HomeExtras{Env: map[string]string{"EXTRA": "1"}}))
	d = read()
	require.Len(t, d.Agents.List, 3)
	assert.Equal(t, "1", d.Agents.List[2]["env"].(map[string]any)["EXTRA"])
	assert.Contains(t, d.Models.Providers, "t-gamma")
	require.NoError(t, box.DropTenant(alpha))
	d = read()
	assert.Equal(t, []any{"default", "gamma"}, []any{d.Agents.List[0]["id"], d.Agents.List[1]["id"]})
	assert.NotContains(t, d.Models.Providers, "t-alpha")
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left beside it")
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
}

// YAML is written for a .yaml path, and a shared config inside the launch
// home (a tenant's place) is refused.
func TestSandboxSharedConfigYAMLAndPlace(t *testing.T) {
	t.Parallel()
	tg := echoTarget("sh", "-c", `echo "$AGENTD_HOME/profiles"`)
	tg.SharedConfig = &SharedConfig{Path: "{root}/config.yaml",
		Sections: []SharedSection{{At: "agents", Key: "{profile}", Template: map[string]any{"key": "{provider_key}"}}}}
	box, err := NewSandbox(context.Background(), t.TempDir(), tg, SandboxOptions{Tenants: tenants.Options{Names: []string{"default", "alpha"}, NoProviders: true}})
	require.NoError(t, err)
	data, err := os.ReadFile(box.SharedConfigPath())
	require.NoError(t, err)
	var d map[string]map[string]map[string]string
	require.NoError(t, yaml.Unmarshal(data, &d), string(data))
	assert.Equal(t, box.Set.Get("alpha").ProviderKey(), d["agents"]["alpha"]["key"])
	require.NoError(t, box.Close())

	tg.SharedConfig.Path = "{root}/home/.agentd/shared.yaml"
	_, err = NewSandbox(context.Background(), t.TempDir(), tg, SandboxOptions{Tenants: tenants.Options{Names: []string{"default"}, NoProviders: true}})
	require.ErrorContains(t, err, "lies inside")
}
