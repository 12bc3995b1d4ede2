package harness

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGatewayRouteFormsLoad: a route's auth is one name (the form of old,
// which keeps Auth) or a list of names and templates; variants, captures
// and {own.X_id} load beside them.
func TestGatewayRouteFormsLoad(t *testing.T) {
	t.Parallel()
	text := `name: gw
kind: gateway
gateway: [gw, --port, "{port}"]
llm_gateway:
  provision: [provision]
  routes:
    - {name: old, path: "/api/token/{token_id}", auth: key, read: true}
    - name: new
      path: /api/log/self
      read: true
      auth:
        - headers
        - session
        - {name: channel pin, bearer: "{key}-{channel_id}", own: any}
        - {name: mixed, headers: {Authorization: "{header.Authorization}", X-Group: "{group_id}", X-Me: "{own.user_id}"}}
      variants: ["?keyword={own.user_id}", "p=2"]
    - {name: make, method: post, path: /api/token, capture: {made: "$.data.id"}}
    - {name: bind, method: PUT, path: "/api/token/{own.token_id}/channel", body: '{"channel_id": {channel_id}}', public: true}
`
	path := filepath.Join(t.TempDir(), "gw.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	tg, err := LoadTarget(path)
	require.NoError(t, err)
	rs := tg.LLMGateway.Routes
	assert.Equal(t, "key", rs[0].Auth, "the single form of old keeps Auth")
	assert.Equal(t, []AuthForm{{Name: "key"}}, rs[0].CredentialForms())
	forms := rs[1].CredentialForms()
	require.Len(t, forms, 4)
	assert.Equal(t, "session", forms[1].Name)
	assert.True(t, forms[2].Template())
	assert.False(t, forms[2].MustWork(), "own: any")
	assert.True(t, forms[3].MustWork())
	assert.Equal(t, []string{"", "?keyword={own.user_id}", "p=2"}, rs[1].Queries())
	assert.True(t, rs[1].NamesForeignIDs(), "a template carrying {group_id} is a foreign probe")
	assert.True(t, rs[1].NamesIDs(), "a variant names the caller's own id")
	assert.Equal(t, "$.data.id", rs[2].Capture["made"])
	assert.False(t, rs[2].NamesForeignIDs())
	assert.True(t, rs[3].NamesForeignIDs())
	assert.True(t, rs[3].Public)
	assert.Equal(t, []AuthForm{{Name: ""}}, rs[3].CredentialForms(), "no auth: the default form")

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte(`name: gw
kind: gateway
gateway: [gw, --port, "{port}"]
llm_gateway:
  provision: [provision]
  routes:
    - {name: r, path: /t, auth: [{name: x, bearer: "{key}", cookie: y}]}
`), 0o644))
	_, err = LoadTarget(bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown field "cookie"`)
}

func TestGatewayRouteFormsValidation(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		route Route
		want  string
	}{
		"template named key":  {Route{Name: "r", Path: "/t", Forms: AuthForms{{Name: "key", Bearer: "{key}"}}}, "built-in form"},
		"unnamed form":        {Route{Name: "r", Path: "/t", Forms: AuthForms{{Bearer: "{key}"}}}, "no name"},
		"twice":               {Route{Name: "r", Path: "/t", Forms: AuthForms{{Name: "key"}, {Name: "key"}}}, "listed twice"},
		"bad own":             {Route{Name: "r", Path: "/t", Forms: AuthForms{{Name: "key", Own: "maybe"}}}, `own "maybe"`},
		"bad template value":  {Route{Name: "r", Path: "/t", Forms: AuthForms{{Name: "x", Bearer: "{secret}"}}}, "placeholder {secret}"},
		"bearer and header":   {Route{Name: "r", Path: "/t", Forms: AuthForms{{Name: "x", Bearer: "{key}", Headers: map[string]string{"Authorization": "y"}}}}, "not both"},
		"bad own placeholder": {Route{Name: "r", Path: "/t/{own.token}"}, "{own.token}"},
		"variant not read":    {Route{Name: "r", Path: "/t", Variants: []string{"?a=1"}}, "give read: true"},
		"empty variant":       {Route{Name: "r", Path: "/t", Read: true, Variants: []string{""}}, "variants[0] is empty"},
		"bad capture path":    {Route{Name: "r", Path: "/t", Capture: map[string]string{"x": "data.id"}}, "want $ first"},
		"bad capture name":    {Route{Name: "r", Path: "/t", Capture: map[string]string{"X-1": "$.id"}}, `capture "X-1"`},
		"read only anonymous": {Route{Name: "r", Path: "/t", Read: true, Forms: AuthForms{{Name: "none"}}}, "other than none"},
		"bad backend":         {Route{Name: "r", Path: "/t", Backend: "dashboard"}, `backend "dashboard"`},
	} {
		tg := Target{Name: "gw", Kind: KindGateway, Gateway: []string{"gw", "--port", "{port}"},
			LLMGateway: &LLMGateway{Provision: []string{"provision"}, Routes: []Route{c.route}}}
		err := tg.Validate()
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), c.want, name)
	}
}

func TestRouteValuesFill(t *testing.T) {
	t.Parallel()
	caller := GatewayAccess{Key: "sk-abc", Headers: map[string]string{"Authorization": "Bearer tok"},
		Credentials: map[string]map[string]string{"session": {"Cookie": "session=s1"}}}
	v := NewRouteValues(caller, map[string]string{"user": "1"}, map[string]string{"user": "2", "channel": "9"})
	got, miss := v.Fill("/u/{user_id}/me/{own.user_id}?k={key}-{channel_id}&b={bare_key}&h={header.Authorization}&c={cred.session.Cookie}")
	assert.Empty(t, miss)
	assert.Equal(t, "/u/2/me/1?k=sk-abc-9&b=abc&h=Bearer tok&c=session=s1", got)
	_, miss = v.Fill("/t/{token_id}")
	assert.Equal(t, "token_id", miss)
	body, miss := v.Fill(`{"id": {channel_id}}`)
	assert.Empty(t, miss, "JSON braces are no placeholder")
	assert.Equal(t, `{"id": 9}`, body)

	assert.Equal(t, "/a?x=1", WithQuery("/a", "?x=1"))
	assert.Equal(t, "/a?p=0&x=1", WithQuery("/a?p=0", "?x=1"))
	assert.Equal(t, "/a?p=0&x=1", WithQuery("/a?p=0", "x=1"))
	assert.Equal(t, "/a", WithQuery("/a", ""))
}

func TestCapturePath(t *testing.T) {
	t.Parallel()
	body := []byte(`{"data": {"id": 42, "items": [{"name": "a"}, {"name": "b"}], "x-id": "q", "ok": true, "none": null, "big": 12345678901234567890}}`)
	for path, want := range map[string]string{
		"$.data.id":            "42",
		"$.data.items[1].name": "b",
		`$.data["x-id"]`:       "q",
		"$.data['x-id']":       "q",
		"$.data.ok":            "true",
		"$.data.big":           "12345678901234567890",
	} {
		p, err := ParseCapturePath(path)
		require.NoError(t, err, path)
		got, err := p.Find(body)
		require.NoError(t, err, path)
		assert.Equal(t, want, got, path)
	}
	for path, want := range map[string]string{
		"$.data.items[2].name": "no [2]",
		"$.data.missing":       `no "missing"`,
		"$.data.none":          "not a string",
		"$.data.items":         "not a string",
		"$.data[0]":            "an object, not a list",
	} {
		p, err := ParseCapturePath(path)
		require.NoError(t, err, path)
		_, err = p.Find(body)
		require.Error(t, err, path)
		assert.Contains(t, err.Error(), want, path)
	}
	for _, bad := range []string{"data.id", "$", "$.", "$.a[", "$.a[-1]", "$.a[x]", "$a"} {
		_, err := ParseCapturePath(bad)
		assert.ErrorIs(t, err, ErrCapturePath, bad)
	}
}

// TestOneAPIExampleLoads keeps examples/targets/one-api/target.yaml valid
// (its module builds one-api, which the tests here cannot fetch): its
// credential forms, query variants and public pages load.
func TestOneAPIExampleLoads(t *testing.T) {
	t.Parallel()
	tg := loadExample(t, "one-api")
	require.True(t, tg.IsGateway())
	byName := map[string]Route{}
	for _, r := range tg.LLMGateway.Routes {
		byName[r.Name] = r
	}
	pin := byName["chat through a pinned channel"]
	require.Len(t, pin.CredentialForms(), 1)
	assert.Equal(t, "sk-{bare_key}-{channel_id}", pin.CredentialForms()[0].Bearer)
	assert.True(t, pin.NamesForeignIDs())
	assert.Len(t, byName["own user"].CredentialForms(), 2)
	assert.NotEmpty(t, byName["own logs"].Variants)
	assert.True(t, byName["status"].Public)
	assert.False(t, byName["own user"].Public)
	assert.Equal(t, "key", byName["relay through a channel by id"].Auth, "the single form of old")
}

// TestProbesForeignIDsPerForm: a route that names an id only in one form
// probes another tenant's ids with that form alone; one whose path names
// an id, with every form.
func TestProbesForeignIDsPerForm(t *testing.T) {
	t.Parallel()
	pinned := AuthForm{Name: "pin", Bearer: "{key}-{channel_id}"}
	chat := Route{Path: "/v1/chat/completions", Forms: AuthForms{{Name: FormKey}, pinned}}
	require.True(t, chat.NamesForeignIDs())
	require.False(t, chat.ProbesForeignIDs(AuthForm{Name: FormKey}), "the plain key names no id: the caller's own call")
	require.True(t, chat.ProbesForeignIDs(pinned))
	token := Route{Path: "/api/token/{token_id}", Forms: AuthForms{{Name: FormKey}}}
	require.True(t, token.ProbesForeignIDs(AuthForm{Name: FormKey}))
	own := Route{Path: "/api/token/{own.token_id}", Forms: AuthForms{{Name: FormKey}}}
	require.False(t, own.ProbesForeignIDs(AuthForm{Name: FormKey}), "the caller's own id is no foreign one")
}
