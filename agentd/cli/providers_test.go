package cli_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
)

// modelProviderPlugin is a model-provider plugin pointing at BASE_URL and
// keyed by CANARYMODEL_KEY, whose extra body says where it was built.
const modelProviderPlugin = `package canarymodel

import (
	"context"
	"os"

	"github.com/tenantcanary/tenantcanary/plugin"
)

type mp struct{}

func (mp) Profile() plugin.ModelProfile {
	return plugin.ModelProfile{Name: "canarymodel", BaseURL: "BASE_URL", EnvVars: []string{"CANARYMODEL_KEY"}}
}

func (mp) BuildExtraBody(ctx context.Context, session string) (map[string]any, error) {
	wd, _ := os.Getwd()
	return map[string]any{"canary_extra": map[string]any{"pid": os.Getpid(), "session": session, "ctx_session": plugin.SessionID(ctx), "wd": wd}}, nil
}

func Register(ctx plugin.Context) error { return ctx.RegisterModelProvider(mp{}) }
`

// imagePlugin is an image provider that says where it ran.
const imagePlugin = `package canaryimage

import (
	"context"
	"os"

	"github.com/tenantcanary/tenantcanary/plugin"
)

type img struct{}

func (img) Name() string { return "canaryimage" }

func (img) Generate(ctx context.Context, prompt string, options map[string]any) (map[string]any, error) {
	return map[string]any{"image": "drawn:" + prompt, "size": options["size"], "pid": os.Getpid(), "session": plugin.SessionID(ctx)}, nil
}

func Register(ctx plugin.Context) error { return ctx.RegisterImageGenProvider(img{}) }
`

func TestPluginModelAndImageProvidersServeTheirOwnProfile(t *testing.T) {
	t.Parallel()
	w, alpha, beta := alphaBetaWorld(t)

	// alpha's LLM provider is its model-provider plugin: base URL and key
	// variable from the plugin, extra body built in alpha's host.
	dir := filepath.Join(alpha.home, "plugins", "model-providers", "canarymodel")
	writeFile(t, filepath.Join(dir, "plugin.yaml"), "name: canarymodel\nversion: \"1.0\"\nkind: model-provider\n")
	writeFile(t, filepath.Join(dir, "plugin.go"), strings.Replace(modelProviderPlugin, "BASE_URL", alpha.srv.BaseURL, 1))
	writeFile(t, filepath.Join(alpha.home, "config.yaml"), fmt.Sprintf(
		"model:\n  provider: plugin:canarymodel\n  default: %s\nterminal:\n  cwd: %s\nplugins:\n  isolation: host\n", alpha.model, alpha.workdir))
	writeFile(t, filepath.Join(alpha.home, ".env"), "CANARYMODEL_KEY="+alpha.key+"\nENV_MARKER="+alpha.marker+"\n")

	// beta has an image provider: its turns offer image_generate.
	idir := filepath.Join(beta.home, "plugins", "canaryimage")
	writeFile(t, filepath.Join(idir, "plugin.yaml"), "name: canaryimage\nversion: \"1.0\"\n")
	writeFile(t, filepath.Join(idir, "plugin.go"), imagePlugin)
	srvB, err := fakellm.New(fakellm.Options{Keys: []string{beta.key}, Responder: func(r fakellm.Record) fakellm.Response {
		if r.EndsWithToolResult() {
			return fakellm.Text("drawn")
		}
		return fakellm.ToolCall("image_generate", map[string]any{"prompt": "a cat " + beta.marker, "options": map[string]any{"size": "64x64"}})
	}})
	require.NoError(t, err)
	t.Cleanup(srvB.Close)
	writeFile(t, filepath.Join(beta.home, "config.yaml"), fmt.Sprintf(
		"model:\n  base_url: %s\n  default: %s\n  key_env: TENANT_PROVIDER_KEY\nplugins:\n  isolation: host\n", srvB.BaseURL, beta.model))

	s, ca, cb, sa, sb := w.serveAlphaBeta()
	t.Cleanup(func() {
		if t.Failed() {
			for _, tn := range []*tenant{alpha, beta} {
				t.Logf("%s agent.log:\n%s", tn.name, mustRead(t, filepath.Join(tn.home, "logs", "agent.log")))
			}
		}
	})
	res := ca.turn(sa, "probe")
	require.Equal(t, "complete", res["status"], "%v", res)
	require.Equal(t, "complete", cb.turn(sb, "draw")["status"])

	// alpha's requests went to the plugin's base URL with the key of its
	// variable, each carrying the extra body built in alpha's host as the
	// session.
	reqs := alpha.srv.RequestsOf(fakellm.KindMain)
	require.Len(t, reqs, 2, "the turn's two model calls reached the plugin provider's base URL")
	for _, r := range reqs {
		require.Equal(t, alpha.key, r.Auth, "the key came from the plugin's key variable")
		extra, ok := r.Body["canary_extra"].(map[string]any)
		require.True(t, ok, "no extra body in %s", r.RawBody)
		require.Equal(t, sa, extra["session"])
		require.Equal(t, sa, extra["ctx_session"])
		require.Equal(t, alpha.home, extra["wd"], "BuildExtraBody ran in the profile's home")
		require.NotEqual(t, float64(s.pid), extra["pid"], "BuildExtraBody ran in the server")
		require.Equal(t, alpha.model, r.Model())
	}
	require.NotContains(t, string(srvB.Requests()[0].RawBody), "canary_extra", "beta's requests got alpha's extra body")

	// beta's image_generate ran its own provider in its own host.
	breqs := srvB.RequestsOf(fakellm.KindMain)
	require.Contains(t, string(breqs[0].RawBody), `"name":"image_generate"`, "the tool is offered")
	results := toolResults(srvB)
	require.Len(t, results, 1)
	var img map[string]any
	require.NoError(t, json.Unmarshal([]byte(results[0]), &img), results[0])
	require.Equal(t, "drawn:a cat "+beta.marker, img["image"])
	require.Equal(t, "64x64", img["size"])
	require.Equal(t, sb, img["session"])
	require.NotEqual(t, float64(s.pid), img["pid"], "the image provider ran in the server")
	for _, r := range reqs {
		require.NotContains(t, string(r.RawBody), `"image_generate"`, "alpha has no image provider, so no image tool")
	}
	s.stop()
}
