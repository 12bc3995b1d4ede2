package llmgw

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// sandbox is a sandbox of two tenants for a running gateway at url whose
// provisioner is the shell script script.
func sandbox(t *testing.T, url, script string) *harness.Sandbox {
	t.Helper()
	tg := harness.Target{Name: "gw", Kind: harness.KindGateway, GatewayURL: url,
		LLMGateway: &harness.LLMGateway{Provision: []string{"/bin/sh", "-c", script}}}
	box, err := harness.NewSandbox(t.Context(), t.TempDir(), tg, harness.SandboxOptions{Tenants: tenants.Options{Names: tenants.Names(2)}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, box.Close()) })
	return box
}

func TestProvisionerContract(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	// The provisioner keeps what it was given and mints a key per tenant.
	script := `cat > "$ROOT/stdin.json"; cp "$ROSTER" "$ROOT/file.json"; echo "$GATEWAY_URL" > "$ROOT/url"
echo '{"tenants": {"default": {"key": "sk-0123456789abcdef0123", "ids": {"user": "1"}},
 "alpha": {"key": "sk-fedcba9876543210fedc", "base_path": "v2/", "headers": {"Authorization": "Bearer aaaabbbbccccddddeeee"}}}}'`
	box := sandbox(t, srv.URL, script)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	g, err := Start(ctx, ctx, box)
	require.NoError(t, err)
	defer g.Stop()

	for _, name := range []string{"stdin.json", "file.json"} {
		data, err := os.ReadFile(filepath.Join(box.Root, name))
		require.NoError(t, err)
		r, err := tenants.DecodeRoster(name, data)
		require.NoError(t, err, "the provisioner got the roster on %s", name)
		assert.Len(t, r.Tenants, 2)
		assert.Equal(t, box.Set.Tenants[0].ProviderURL(), r.Tenants[0].BaseURL)
	}
	url, err := os.ReadFile(filepath.Join(box.Root, "url"))
	require.NoError(t, err)
	assert.Equal(t, srv.URL+"\n", string(url))

	d, a := box.Set.Get("default"), box.Set.Get("alpha")
	assert.Equal(t, "/v1", g.Access(d).BasePath, "the default base path")
	assert.Equal(t, "/v2", g.Access(a).BasePath)
	assert.Equal(t, []string{d.Model()}, g.Access(d).Models, "models default to the tenant's own")
	assert.Equal(t, "1", g.Access(d).IDs["user"])
	kinds := map[string]tenants.Kind{}
	for _, c := range append(d.Canaries(), a.Canaries()...) {
		kinds[c.Value] = c.Kind
	}
	assert.Equal(t, tenants.GatewayKey, kinds["sk-0123456789abcdef0123"], "the minted key is a canary")
	assert.Equal(t, tenants.GatewayKey, kinds["0123456789abcdef0123"], "and without its sk- prefix")
	assert.Equal(t, tenants.GatewayCredential, kinds["aaaabbbbccccddddeeee"], "a header's credential is one too")
	assert.True(t, tenants.GatewayKey.Secret())
}

func TestProvisionerFailuresSayWhy(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	for name, c := range map[string]struct{ script, want string }{
		"exits":          {`echo boom >&2; exit 3`, "boom"},
		"not json":       {`echo hello`, "its stdout is not"},
		"unknown field":  {`echo '{"tenants": {}, "extra": 1}'`, "its stdout is not"},
		"missing tenant": {`echo '{"tenants": {"default": {"key": "sk-0123456789abcdef0123"}}}'`, "no access for tenant alpha"},
		"no key":         {`echo '{"tenants": {"default": {"key": "sk-0123456789abcdef0123"}, "alpha": {}}}'`, "tenant alpha no key"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			box := sandbox(t, srv.URL, c.script)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			_, err := Start(ctx, ctx, box)
			require.ErrorIs(t, err, ErrProvision)
			assert.ErrorContains(t, err, c.want)
		})
	}
}

func TestAccessTemplatesFillAgentd(t *testing.T) {
	t.Parallel()
	box := sandbox(t, "http://127.0.0.1:1", "true")
	d, a := box.Set.Get("default"), box.Set.Get("alpha")
	require.True(t, d.Launch)
	assert.Equal(t, harness.GatewayAccess{Key: d.APIServerKey(), BasePath: "/v1", Models: []string{d.Model()}}, harness.AgentdAccess.For(d))
	assert.Equal(t, harness.GatewayAccess{Key: a.APIServerKey(), BasePath: "/p/alpha/v1", Models: []string{a.Model()}}, harness.AgentdAccess.For(a))
}
