package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/tenants"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "target.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	return p
}

// loadStdioTarget loads a target file: a target x on stdio (srv), and the
// rest of the file, yaml.
func loadStdioTarget(t *testing.T, yaml string) (Target, error) {
	t.Helper()
	return LoadTarget(writeFile(t, "name: x\nstdio: [srv]\n"+yaml))
}

// requireLoadFails: the target file loadStdioTarget makes of yaml does not
// load, and its error names each of wants.
func requireLoadFails(t *testing.T, yaml string, wants ...string) {
	t.Helper()
	_, err := loadStdioTarget(t, yaml)
	require.Error(t, err)
	for _, want := range wants {
		assert.ErrorContains(t, err, want)
	}
}

func TestLoadTargetStaging(t *testing.T) {
	t.Parallel()
	tg, err := LoadTarget(writeFile(t, `
name: staging
version: "1.2"
url: http://10.0.0.5:8080
token: secret-token
gateway_url: http://10.0.0.5:8081
tenants_file: stage/tenants.json
layout: {home_var: HERMES_HOME, launch_dir: .hermes}
`))
	require.NoError(t, err)
	assert.True(t, tg.Remote())
	assert.False(t, tg.Files)
	assert.Equal(t, "HERMES_HOME", tg.Layout.HomeVar)
	assert.Equal(t, "8080", tg.ReadyRE().FindStringSubmatch("backend listening on 127.0.0.1:8080")[2])
	for _, b := range []Backend{BackendServe, BackendGateway} {
		ok, why := tg.Supports(b)
		assert.True(t, ok, "%s: %s", b, why)
	}
	ok, why := tg.Supports(BackendStdio)
	assert.False(t, ok)
	assert.Contains(t, why, "no stdio command")
	assert.False(t, tg.CanRestart())

	_, err = LoadTarget(writeFile(t, "name: s\nurl: http://x:1\ntoken: t\n"))
	assert.ErrorContains(t, err, "needs tenants_file")
}

func TestLoadTargetNamesEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := LoadTarget(writeFile(t, `
serve: [srv, --port, "{prot}"]
ready_line: "listening \\d+"
files: true
`))
	require.Error(t, err)
	for _, want := range []string{"name is empty", "{prot}", "want a port group", "without token_var", "profile_root"} {
		assert.ErrorContains(t, err, want)
	}
	_, err = LoadTarget(writeFile(t, "name: x\nstdoi: [a]\n"))
	assert.ErrorContains(t, err, "stdoi", "an unknown field is an error")
	_, err = LoadTarget(writeFile(t, "name: x\n"))
	assert.ErrorContains(t, err, "no backend")
	_, err = LoadTarget(filepath.Join(t.TempDir(), "missing.yaml"))
	assert.ErrorContains(t, err, "missing.yaml")
}

func TestAgentdTargetIsValid(t *testing.T) {
	t.Parallel()
	tg := AgentdTarget("/bin/canary-run", "agentd")
	require.NoError(t, tg.Validate())
	assert.Equal(t, []string{"/bin/canary-run", "agentd", "tui"}, tg.Stdio)
	assert.Equal(t, []string{"/bin/canary-run", "agentd", "serve", "--host", "127.0.0.1", "--port", "0", "--cron", "--cron-interval", "1s"},
		Expand(tg.Serve, map[string]string{"host": "127.0.0.1", "cron_interval": "1s"}))
}

func TestGatewayClientSpeaksOpenAI(t *testing.T) {
	t.Parallel()
	// fakellm speaks the same wire as any OpenAI-compatible gateway.
	// A body without tools is an aux request to fakellm.
	srv, err := fakellm.New(fakellm.Options{Keys: []string{"k1"}, AuxResponder: func(fakellm.Record) fakellm.Response {
		return fakellm.Text("hello from the gateway").WithChunkSize(3)
	}})
	require.NoError(t, err)
	defer srv.Close()
	g := &GatewayClient{Base: srv.URL}
	ctx := context.Background()
	for _, stream := range []bool{false, true} {
		r, err := g.Chat(ctx, "/v1/chat/completions", "k1", "hi", stream)
		require.NoError(t, err)
		assert.Equal(t, 200, r.Status)
		assert.Equal(t, "hello from the gateway", r.Text, "stream=%v", stream)
	}
	r, err := g.Chat(ctx, "/v1/chat/completions", "k2", "hi", false)
	require.NoError(t, err)
	assert.Equal(t, 401, r.Status)
	assert.Equal(t, "/p/alpha/v1/chat/completions", RoutePath("alpha", false))
	assert.Equal(t, "/v1/chat/completions", RoutePath("default", true))
}

// TestAgentdTargetDeclaresWorkdirRoots: the embedded target's operator
// scope allows each profile its own folder of workdirs, where the tenants
// package makes them (<work root>/<profile>), {root} expanded per sandbox.
func TestAgentdTargetDeclaresWorkdirRoots(t *testing.T) {
	t.Parallel()
	tg := AgentdTarget("/bin/agentd")
	got := tg.ManagedFor("/sandbox")
	assert.Equal(t, map[string]any{"terminal": map[string]any{"workdir_roots": []any{"/sandbox/work/{profile}"}}}, got)
	assert.Equal(t, "{root}/work/{profile}", tg.Managed["terminal"].(map[string]any)["workdir_roots"].([]any)[0], "the target itself is unchanged")
	s, err := tenants.Build(t.TempDir(), tenants.Options{Names: []string{"default", "alpha"}, NoProviders: true})
	require.NoError(t, err)
	defer s.Close()
	for _, tn := range s.Tenants {
		root := strings.ReplaceAll("{root}/work/{profile}", "{root}", s.Root)
		assert.Equal(t, strings.ReplaceAll(root, "{profile}", tn.Profile()), filepath.Dir(tn.Workdir))
	}
}

// replica_urls belong to a running server, parse as its url does, and
// name each replica once.
func TestReplicaURLsAreValidated(t *testing.T) {
	t.Parallel()
	base := Target{Name: "staging", URL: "http://127.0.0.1:8787", Token: "tok", TenantsFile: "tenants.json"}
	ok := base
	ok.ReplicaURLs = []string{"http://127.0.0.1:8788", "https://replica-3.internal"}
	require.NoError(t, ok.Validate())
	require.Equal(t, 3, ok.ReplicaCount())
	require.Equal(t, "https://replica-3.internal", ok.ReplicaURL(3))
	for name, tc := range map[string]struct {
		mutate func(*Target)
		want   string
	}{
		"no url":    {func(tg *Target) { tg.URL = ""; tg.Serve = []string{"srv"}; tg.ReplicaURLs = []string{"http://h:1"} }, "replica_urls: a running server's other replicas, and the target gives no url"},
		"not a url": {func(tg *Target) { tg.ReplicaURLs = []string{"127.0.0.1:8788"} }, `replica_urls[0]: "127.0.0.1:8788": want http(s)://HOST:PORT`},
		"url again": {func(tg *Target) { tg.ReplicaURLs = []string{"http://127.0.0.1:8787/"} }, "given twice (or the same as url)"},
		"too many": {func(tg *Target) {
			for i := range MaxReplicas {
				tg.ReplicaURLs = append(tg.ReplicaURLs, fmt.Sprintf("http://h:%d", 9000+i))
			}
		}, "replica_urls: 8: want at most 7"},
	} {
		t.Run(name, func(t *testing.T) {
			tg := base
			tc.mutate(&tg)
			err := tg.Validate()
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}
