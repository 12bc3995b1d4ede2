package tenants

import (
	"bytes"
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
)

var alphabet = regexp.MustCompile(`^[a-z0-9-]+$`)

func buildFiles(t *testing.T, names ...string) *Set {
	t.Helper()
	s, err := Build(t.TempDir(), Options{Names: names, NoProviders: true})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

func TestCanaryValuesSurviveEscapingAndNameTheirOwner(t *testing.T) {
	t.Parallel()
	s := buildFiles(t, "default", "alpha", "beta-2")
	for _, tn := range s.Tenants {
		require.Regexp(t, `^[0-9a-f]{10}$`, tn.Tag)
		cs := tn.Canaries()
		require.Len(t, cs, len(BaseKinds))
		values := map[string]bool{}
		for _, c := range cs {
			assert.Equal(t, tn.Name, c.Owner)
			assert.Contains(t, strings.ToLower(c.Value), tn.Tag, "%s carries the tag", c.Kind)
			assert.False(t, values[c.Value], "%s repeats a value", c.Kind)
			values[c.Value] = true
			if c.Kind == EnvName {
				assert.Regexp(t, `^CANARY_[A-Z0-9_]+_[0-9A-F]{10}$`, c.Value)
				continue
			}
			assert.Regexp(t, alphabet, c.Value, "%s", c.Kind)
			j, err := json.Marshal(c.Value)
			require.NoError(t, err)
			assert.Equal(t, `"`+c.Value+`"`, string(j))
			assert.Equal(t, c.Value, url.QueryEscape(c.Value))
			assert.Equal(t, c.Value, html.EscapeString(c.Value))
		}
	}
	assert.Equal(t, "CANARY_BETA_2_"+strings.ToUpper(s.Get("beta-2").Tag), s.Get("beta-2").Value(EnvName))
	assert.Equal(t, "provider-key-alpha-"+s.Get("alpha").Tag, s.Get("alpha").ProviderKey())
}

func TestBuildsNeverShareATag(t *testing.T) {
	t.Parallel()
	tags := map[string]bool{}
	for i := 0; i < 20; i++ {
		s := buildFiles(t, Names(8)...)
		for _, tn := range s.Tenants {
			require.False(t, tags[tn.Tag], "tag %s seen twice", tn.Tag)
			tags[tn.Tag] = true
		}
	}
	require.Len(t, tags, 160)
}

func TestBuildLaysOutLaunchAndProfileHomes(t *testing.T) {
	t.Parallel()
	s := buildFiles(t, Names(30)...)
	require.Len(t, s.Tenants, 30)
	assert.Equal(t, "t025", s.Tenants[25].Name)
	launch := s.Launch()
	require.NotNil(t, launch)
	assert.Equal(t, "default", launch.Name)
	assert.Equal(t, filepath.Join(s.Root, "home", ".agentd"), launch.Home)
	assert.Equal(t, filepath.Join(s.LaunchHome, "profiles", "alpha"), s.Get("alpha").Home)
	for _, tn := range s.Tenants {
		assert.DirExists(t, tn.Workdir)
		assert.Equal(t, tn.Launch, tn == launch)
		assert.Equal(t, tn.Value(Workdir), filepath.Base(tn.Workdir))
		assert.Equal(t, filepath.Join(s.WorkRoot(), tn.Profile()), filepath.Dir(tn.Workdir), "a tenant's workdirs lie in <work root>/<profile>")
	}
	assert.Nil(t, s.Get("nobody"))
}

func TestBuildRejectsBadInput(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string]Options{
		"upper case":  {Names: []string{"Alpha"}, NoProviders: true},
		"underscore":  {Names: []string{"al_pha"}, NoProviders: true},
		"duplicate":   {Names: []string{"alpha", "alpha"}, NoProviders: true},
		"no launch":   {Names: []string{"alpha"}, Launch: "beta", NoProviders: true},
		"too long":    {Names: []string{strings.Repeat("a", 33)}, NoProviders: true},
		"empty name":  {Names: []string{""}, NoProviders: true},
		"digit first": {Names: []string{"1x"}, NoProviders: true},
	} {
		_, err := Build(t.TempDir(), opts)
		assert.Error(t, err, name)
	}
	_, err := Build(t.TempDir(), Options{Names: []string{"Alpha"}, NoProviders: true})
	assert.ErrorContains(t, err, `"Alpha"`)
}

func TestWrittenHomeParsesBackToPlantedValues(t *testing.T) {
	t.Parallel()
	s := buildFiles(t, "default", "alpha")
	extras := HomeExtras{
		Config: map[string]any{"plugins": map[string]any{"isolation": "host"}, "model": map[string]any{"context_length": 4096}},
		Env:    map[string]string{"QUOTED": `a "b" $c \d`, "MULTI": "x\ny"},
		Files:  map[string]string{"plugins/p/plugin.yaml": "name: p\n"},
	}
	require.NoError(t, s.WriteHomes(extras))
	for _, tn := range s.Tenants {
		h, err := ReadHome(tn.Home)
		require.NoError(t, err)
		model := h.Config["model"].(map[string]any)
		assert.Equal(t, tn.Model(), model["default"])
		assert.Equal(t, "TENANT_PROVIDER_KEY", model["key_env"])
		assert.Equal(t, 4096, model["context_length"], "extras deep-merge")
		assert.Equal(t, "custom", model["provider"], "deep-merge keeps siblings")
		assert.Equal(t, tn.Workdir, h.Config["terminal"].(map[string]any)["cwd"])
		assert.Equal(t, "host", h.Config["plugins"].(map[string]any)["isolation"])
		assert.Equal(t, tn.ProviderKey(), h.Env["TENANT_PROVIDER_KEY"])
		assert.Equal(t, tn.APIServerKey(), h.Env["API_SERVER_KEY"])
		assert.Equal(t, tn.Value(EnvMarker), h.Env["TENANT_MARKER"])
		assert.Equal(t, tn.Value(EnvMarker), h.Env[tn.Value(EnvName)])
		assert.Equal(t, `a "b" $c \d`, h.Env["QUOTED"])
		assert.Equal(t, "x\ny", h.Env["MULTI"])
		assert.Equal(t, tn.Value(Memory)+"\n", h.Memory)
		assert.Contains(t, h.Soul, tn.Value(Soul))
		assert.FileExists(t, filepath.Join(tn.Home, "plugins", "p", "plugin.yaml"))
		info, err := os.Stat(filepath.Join(tn.Home, ".env"))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), ".env holds secrets")
	}
	// Exactly one variable name per tenant is unique to it.
	a, _ := ReadHome(s.Get("alpha").Home)
	d, _ := ReadHome(s.Get("default").Home)
	var onlyA []string
	for k := range a.Env {
		if _, ok := d.Env[k]; !ok {
			onlyA = append(onlyA, k)
		}
	}
	assert.Equal(t, []string{s.Get("alpha").Value(EnvName)}, onlyA)
}

func TestWriteHomeRefusesFilesOutsideOrOverPlanted(t *testing.T) {
	t.Parallel()
	s := buildFiles(t, "default")
	for _, bad := range []string{"../escape", "/etc/x", ".env"} {
		err := s.Tenants[0].WriteHome(s.Layout, HomeExtras{Files: map[string]string{bad: "x"}})
		assert.ErrorContains(t, err, bad)
	}
	assert.NoFileExists(t, filepath.Join(s.Root, "home", "escape"))
}

func TestParseDotEnvNamesTheBadLine(t *testing.T) {
	t.Parallel()
	_, err := ParseDotEnv([]byte("# c\nA=1\n\nexport B=2\nnot a pair\n"))
	require.ErrorContains(t, err, "line 5")
	env, err := ParseDotEnv([]byte("# c\nA=1\nexport B=\"2 3\"\n"))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"A": "1", "B": "2 3"}, env)
}

// TestProfileNamesTheLaunchTenantAsTheTargetDoes: the launch tenant's
// workdirs lie in <work root>/default whatever its own name.
func TestProfileNamesTheLaunchTenantAsTheTargetDoes(t *testing.T) {
	t.Parallel()
	s, err := Build(t.TempDir(), Options{Names: []string{"alpha", "beta"}, Launch: "beta", NoProviders: true})
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, LaunchProfile, s.Get("beta").Profile())
	assert.Equal(t, "alpha", s.Get("alpha").Profile())
	assert.Equal(t, filepath.Join(s.WorkRoot(), "default"), filepath.Dir(s.Get("beta").Workdir))
	assert.Equal(t, filepath.Join(s.Root, "work"), s.WorkRoot(), "the default work root")
}

func TestMintAddsScannedCanariesAndWorkdirs(t *testing.T) {
	t.Parallel()
	s := buildFiles(t, "default", "alpha")
	a := s.Get("alpha")
	key, err := a.Mint(SavedKey)
	require.NoError(t, err)
	assert.Regexp(t, `^saved-key-alpha-[0-9a-f]{10}$`, key.Value)
	assert.NotContains(t, key.Value, a.Tag, "a minted canary has a fresh tag")
	dir, err := a.MintWorkdir()
	require.NoError(t, err)
	assert.DirExists(t, dir)
	assert.Equal(t, []string{a.Workdir, dir}, a.Workdirs())
	assert.Equal(t, filepath.Join(s.WorkRoot(), "alpha"), filepath.Dir(dir), "minted beside the first, in its profile's folder")
	all := a.Canaries()
	assert.Len(t, all, len(BaseKinds)+2)
	assert.Equal(t, key, all[len(BaseKinds)])
	var secrets []Kind
	for _, c := range a.Secrets() {
		secrets = append(secrets, c.Kind)
	}
	assert.Equal(t, []Kind{ProviderKey, APIServerKey, SavedKey}, secrets)
	_, err = a.Mint("Bad-Kind")
	assert.ErrorContains(t, err, "Bad-Kind")
	assert.Len(t, s.Canaries(), 2*len(BaseKinds)+2)
}

func TestHermeticEnvStripsCredentialsAndAnchorsHome(t *testing.T) {
	t.Parallel()
	sandbox := t.TempDir()
	base := []string{
		"PATH=/usr/bin", "LANG=C.UTF-8", "OPENAI_API_KEY=sk-real", "GITHUB_TOKEN=ghp", "AWS_PROFILE=prod",
		"MY_SECRET=x", "AGENTD_HOME=/real/.agentd", "AGENTD_SESSION_TOKEN=t", "HTTPS_PROXY=http://proxy",
		"XDG_CONFIG_HOME=/real/.config", "CANARY_ALPHA_ABC=1", "TENANT_MARKER=m", "FOO_BASE_URL=http://x",
		"SSH_AUTH_SOCK=/tmp/agent", "HOME=/root", "NOT_A_PAIR",
	}
	for _, real := range RealHomes() {
		base = append(base, "TF_CLI_CONFIG_FILE="+filepath.Join(real, ".terraformrc"), "PYENV_ROOT="+real+"/.pyenv",
			"GOPATH="+filepath.Join(real, "go"))
		base[0] += ":" + filepath.Join(real, "bin")
	}
	env, err := HermeticEnv(base, sandbox, AgentdLayout(), map[string]string{"EXTRA": "1"})
	require.NoError(t, err)
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	abs, _ := filepath.Abs(sandbox)
	assert.Equal(t, map[string]string{
		"PATH": "/usr/bin", "LANG": "C.UTF-8", "HOME": abs, "AGENTD_HOME": filepath.Join(abs, ".agentd"),
		"NO_COLOR": "1", "TERM": "dumb", "NO_PROXY": "127.0.0.1,localhost,::1", "no_proxy": "127.0.0.1,localhost,::1",
		"EXTRA": "1",
	}, got)
}

func TestHermeticEnvRefusesTheRealHome(t *testing.T) {
	t.Parallel()
	for _, real := range RealHomes() {
		_, err := HermeticEnv(nil, real, AgentdLayout(), nil)
		require.ErrorIs(t, err, ErrRealHome)
		_, err = HermeticEnv(nil, filepath.Dir(real), AgentdLayout(), nil)
		require.ErrorIs(t, err, ErrRealHome, "a home that holds the real one")
	}
	require.NotEmpty(t, RealHomes())
	// A folder beside the real home is allowed. It is only named, never
	// created: the real home's parent is not the test's to write (on CI it is
	// not even writable).
	beside := filepath.Join(filepath.Dir(RealHomes()[0]), "tenantcanary-beside-home")
	require.NoError(t, CheckSandboxHome(beside), "a fresh folder beside, not holding, the real home")
	_, err := HermeticEnv(nil, beside, AgentdLayout(), nil)
	require.NoError(t, err)
}

func TestProvidersAcceptOnlyTheirTenantsKeyAndProbe(t *testing.T) {
	t.Parallel()
	s, err := Build(t.TempDir(), Options{Names: []string{"default", "alpha"}})
	require.NoError(t, err)
	defer s.Close()
	d, a := s.Get("default"), s.Get("alpha")
	post := func(tn *Tenant, key string, body map[string]any) int {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", tn.Provider.BaseURL+"/chat/completions", bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		if resp.StatusCode == 200 {
			msg := out["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
			if calls, ok := msg["tool_calls"].([]any); ok {
				fn := calls[0].(map[string]any)["function"].(map[string]any)
				assert.Equal(t, "terminal", fn["name"])
				var args map[string]string
				require.NoError(t, json.Unmarshal([]byte(fn["arguments"].(string)), &args))
				assert.Equal(t, tn.ProbeCommand(), args["command"])
				assert.Contains(t, args["command"], tn.Value(ShellState))
			} else {
				assert.Equal(t, "probe done for "+tn.Name+" ["+tn.Value(Reply)+"]", msg["content"])
			}
		}
		return resp.StatusCode
	}
	tools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "terminal"}}}
	user := map[string]any{"model": a.Model(), "tools": tools, "messages": []any{map[string]any{"role": "user", "content": "hi"}}}
	tool := map[string]any{"model": a.Model(), "tools": tools, "messages": []any{
		map[string]any{"role": "user", "content": "hi"},
		map[string]any{"role": "tool", "tool_call_id": "c1", "content": "SNAPSHOT-BEGIN"}}}
	assert.Equal(t, 200, post(a, a.ProviderKey(), user))
	assert.Equal(t, 200, post(a, a.ProviderKey(), tool))
	assert.Equal(t, 401, post(a, d.ProviderKey(), user), "foreign key refused")
	recs := a.Provider.Requests()
	require.Len(t, recs, 3, "the refused request is on the record too")
	assert.Equal(t, d.ProviderKey(), recs[2].Auth)
	assert.Equal(t, fakellm.KindMain, recs[0].Kind)
	assert.Empty(t, d.Provider.Requests())
}

func TestEnvOfSetIsHermetic(t *testing.T) {
	t.Parallel()
	s := buildFiles(t, "default")
	env, err := s.Env(map[string]string{"AGENTD_SESSION_TOKEN": "tok"})
	require.NoError(t, err)
	assert.Contains(t, env, "HOME="+s.Home)
	assert.Contains(t, env, "AGENTD_HOME="+s.LaunchHome)
	assert.Contains(t, env, "AGENTD_SESSION_TOKEN=tok")
}

func TestAddTenantMidRun(t *testing.T) {
	t.Parallel()
	s, err := Build(t.TempDir(), Options{Names: []string{"default", "alpha"}})
	require.NoError(t, err)
	defer s.Close()
	g, err := s.AddTenant("gamma")
	require.NoError(t, err)
	assert.Same(t, g, s.Get("gamma"))
	assert.False(t, g.Launch)
	assert.Equal(t, filepath.Join(s.LaunchHome, "profiles", "gamma"), g.Home)
	assert.DirExists(t, g.Workdir)
	assert.Equal(t, filepath.Join(s.WorkRoot(), "gamma"), filepath.Dir(g.Workdir))
	require.NotNil(t, g.Provider)
	assert.NotEqual(t, s.Get("alpha").Provider.URL, g.Provider.URL)
	_, err = s.AddTenant("gamma")
	assert.ErrorContains(t, err, `"gamma" exists`)
	_, err = s.AddTenant("Bad")
	assert.ErrorContains(t, err, "Bad")
	require.NoError(t, g.WriteHome(s.Layout, HomeExtras{}))
	h, err := ReadHome(g.Home)
	require.NoError(t, err)
	assert.Equal(t, g.ProviderKey(), h.Env["TENANT_PROVIDER_KEY"])
}

func TestLayoutCheckState(t *testing.T) {
	t.Parallel()
	ok := Layout{StateRoot: "{root}/state", StateDir: "agents/{profile}", StateDB: "db/sessions.sqlite"}
	require.Empty(t, ok.CheckState())
	for field, l := range map[string]Layout{
		"layout.state_root": {StateRoot: "/var/lib/state"},
		"layout.state_dir":  {StateRoot: "{root}/state", StateDir: "agents"},
		"layout.state_db":   {StateDB: "../elsewhere.db"},
	} {
		errs := l.CheckState()
		require.NotEmpty(t, errs, field)
		require.Contains(t, errs[0].Error(), field)
	}
	require.NotEmpty(t, Layout{StateRoot: "{root}/state", StateDir: "../{name}"}.CheckState())
	require.NotEmpty(t, Layout{StateRoot: "{root}/state", StateDir: "{agent}"}.CheckState())
	require.NotEmpty(t, Layout{StateDir: "{name}"}.CheckState(), "state_dir without state_root")
	require.NotEmpty(t, Layout{StateRoot: "{root}/.."}.CheckState())
}
