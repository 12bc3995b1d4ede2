package llmgw

import (
	"context"
	"encoding/json"
	"io"
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

// TestFetchListener: a registered URL answers its body and records the
// hit; an unknown path is recorded and answered 404; Close is safe twice.
func TestFetchListener(t *testing.T) {
	t.Parallel()
	l, err := NewFetchListener()
	require.NoError(t, err)
	defer l.Close()
	u := l.URL("alpha", "1", "fetch_body-alpha-0123456789")
	assert.Empty(t, l.HitsOn(u))
	get := func(url string) (int, string) {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	st, body := get(u)
	assert.Equal(t, 200, st)
	assert.Equal(t, "fetch_body-alpha-0123456789", body)
	require.Len(t, l.HitsOn(u), 1)
	assert.Equal(t, "GET", l.HitsOn(u)[0].Method)
	st, _ = get(l.Base() + "/elsewhere")
	assert.Equal(t, 404, st)
	assert.Len(t, l.Hits(), 2)
	require.NoError(t, l.Close())
	require.NoError(t, l.Close())
}

// TestSetURLField: a body field (dotted, made as needed) or a query
// parameter is set; a body that is not an object is an error.
func TestSetURLField(t *testing.T) {
	t.Parallel()
	p, b, err := SetURLField("/api/fetch", `{"url": "https://example.invalid/x", "n": 1}`, "url", "http://127.0.0.1:9/a")
	require.NoError(t, err)
	assert.Equal(t, "/api/fetch", p)
	assert.JSONEq(t, `{"url": "http://127.0.0.1:9/a", "n": 1}`, b)
	_, b, err = SetURLField("/x", "", "image.url", "http://127.0.0.1:9/b")
	require.NoError(t, err)
	assert.JSONEq(t, `{"image": {"url": "http://127.0.0.1:9/b"}}`, b)
	p, b, err = SetURLField("/hook?a=1", `{"k": 2}`, "?callback", "http://127.0.0.1:9/c")
	require.NoError(t, err)
	assert.Equal(t, "/hook?a=1&callback=http%3A%2F%2F127.0.0.1%3A9%2Fc", p)
	assert.Equal(t, `{"k": 2}`, b)
	_, _, err = SetURLField("/x", `[1]`, "url", "u")
	assert.Error(t, err)
}

// TestSetURLFieldIndexesArrays: a[] stands for every element of the array
// a: every image part of every message gets the URL, a text part beside
// it is left alone; a path that names an array as a mapping, or an array
// the body does not have, is an error naming where, never a new field.
func TestSetURLFieldIndexesArrays(t *testing.T) {
	t.Parallel()
	body := `{"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "https://x.invalid/a.png"}}]}]}`
	_, b, err := SetURLField("/v1/chat/completions", body, "messages[].content[].image_url.url", "http://127.0.0.1:9/i")
	require.NoError(t, err)
	assert.JSONEq(t, `{"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "http://127.0.0.1:9/i"}}]}]}`, b)
	_, _, err = SetURLField("/v1/chat/completions", body, "messages.content.image_url.url", "u")
	require.ErrorContains(t, err, "messages is an array in the document: index it as messages[]", "the old dotted path was silently wrong")
	_, _, err = SetURLField("/v1/chat/completions", `{"messages": [{"content": "text only"}]}`, "messages[].content[].image_url.url", "u")
	require.ErrorContains(t, err, "no place in the route's body", "an element of another shape is left alone, and nothing else is there")
	_, _, err = SetURLField("/x", `{"n": 1}`, "files[].url", "u")
	require.ErrorContains(t, err, "files is not an array")
	_, b, err = SetURLField("/x", `{"urls": ["a", "b"]}`, "urls[]", "u")
	require.NoError(t, err)
	assert.JSONEq(t, `{"urls": ["u", "u"]}`, b)
}

// TestCredentialsOf: the key, the headers together, and each long header
// value alone as a bearer token, unless it is the one Authorization
// header already presented.
func TestCredentialsOf(t *testing.T) {
	t.Parallel()
	names := func(cs []Credential) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}
	a := harness.GatewayAccess{Key: "sk-0123456789abcdef", Headers: map[string]string{"Authorization": "Bearer access-0123456789abcdef"}}
	assert.Equal(t, []string{"gateway key", "management headers"}, names(CredentialsOf(a)))
	a.Headers["New-Api-User"] = "3"
	a.Headers["X-Session"] = "session-0123456789abcdef"
	cs := CredentialsOf(a)
	assert.Equal(t, []string{"gateway key", "management headers", "header Authorization as a bearer token", "header X-Session as a bearer token"}, names(cs))
	assert.Equal(t, "Bearer session-0123456789abcdef", cs[3].Headers["Authorization"])
	assert.Empty(t, CredentialsOf(harness.GatewayAccess{}))
}

// TestDeprovisionUndeclared: a gateway whose target declares no
// deprovision says so with ErrNoDeprovision.
func TestDeprovisionUndeclared(t *testing.T) {
	t.Parallel()
	g := &Gateway{}
	assert.False(t, g.CanDeprovision())
	assert.ErrorIs(t, g.Deprovision(context.Background(), nil, harness.StepDisable), ErrNoDeprovision)
}

// TestDeprovisionContract: the deprovision command gets the step, tenant
// and access on stdin and STEP, TENANT, GATEWAY_URL in its environment;
// a failing one is an error naming the step; the provisioner's
// operator_secrets are kept; RETRIES reaches the provisioner when asked;
// ProvisionAs provisions one tenant under another's name.
func TestDeprovisionContract(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	script := `cat > /dev/null; echo "retries=$RETRIES" > "$ROOT/retries"
echo '{"tenants": {"default": {"key": "sk-0123456789abcdef0123", "ids": {"user": "1"}},
 "alpha": {"key": "sk-fedcba9876543210fedc", "ids": {"user": "2"}}},
 "operator_secrets": {"admin_password": "admin-password-0123456789"}}'`
	tg := harness.Target{Name: "gw", Kind: harness.KindGateway, GatewayURL: srv.URL,
		LLMGateway: &harness.LLMGateway{Provision: []string{"/bin/sh", "-c", script},
			Deprovision: []string{"/bin/sh", "-c", `cat > "$ROOT/off-$STEP.json"; echo "$STEP $TENANT $GATEWAY_URL" > "$ROOT/off-$STEP.env"; [ "$STEP" != delete ] || [ ! -e "$ROOT/fail-delete" ] || exit 3`}}}
	box, err := harness.NewSandbox(t.Context(), t.TempDir(), tg, harness.SandboxOptions{Tenants: tenants.Options{Names: tenants.Names(2)}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, box.Close()) })
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	g, err := StartWith(ctx, ctx, box, Options{Retries: true})
	require.NoError(t, err)
	defer g.Stop()
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(box.Root, name))
		require.NoError(t, err)
		return string(b)
	}
	assert.Equal(t, "retries=1\n", read("retries"))
	assert.Equal(t, map[string]string{"admin_password": "admin-password-0123456789"}, g.OperatorSecrets())
	a := box.Set.Get("alpha")
	require.True(t, g.CanDeprovision())
	require.NoError(t, g.Deprovision(ctx, a, harness.StepDisable))
	assert.Equal(t, harness.StepDisable, g.Offboarded(a))
	var req harness.DeprovisionRequest
	require.NoError(t, json.Unmarshal([]byte(read("off-disable.json")), &req))
	assert.Equal(t, harness.DeprovisionRequest{Step: "disable", Tenant: "alpha", Access: g.Access(a)}, req)
	assert.Equal(t, "disable alpha "+srv.URL+"\n", read("off-disable.env"))
	require.NoError(t, os.WriteFile(filepath.Join(box.Root, "fail-delete"), nil, 0o644))
	err = g.Deprovision(ctx, a, harness.StepDelete)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "delete")
	assert.Equal(t, harness.StepDisable, g.Offboarded(a), "a failed step is not recorded")
	assert.Error(t, g.Deprovision(ctx, a, "archive"), "an unknown step")

	// Provisioned again under alpha's name: the script answers for
	// "alpha", which becomes the successor's access.
	s, err := box.Set.AddTenant("alpha-again")
	require.NoError(t, err)
	require.NoError(t, g.ProvisionAs(ctx, s, "alpha"))
	assert.Equal(t, "sk-fedcba9876543210fedc", g.Access(s).Key)
	assert.Equal(t, []string{s.Model()}, g.Access(s).Models, "its own model by default")
	g.AddIDs(s, map[string]string{"log": "9", "user": "99"})
	assert.Equal(t, map[string]string{"log": "9", "user": "2"}, g.Access(s).IDs, "the provisioner's ids win")
}
