package llmgw

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/tenantcanary/tenantcanary/harness"
)

func TestFormHeaders(t *testing.T) {
	t.Parallel()
	caller := harness.GatewayAccess{Key: "sk-k1", Headers: map[string]string{"Authorization": "tok1"},
		Credentials: map[string]map[string]string{"session": {"Cookie": "session=s1"}}}
	v := harness.NewRouteValues(caller, map[string]string{"user": "1"}, map[string]string{"channel": "7"})
	r := harness.Route{Name: "r", Path: "/t"}
	for name, c := range map[string]struct {
		form harness.AuthForm
		want map[string]string
		why  string
	}{
		"none":     {harness.AuthForm{Name: "none"}, map[string]string{}, ""},
		"default":  {harness.AuthForm{}, map[string]string{"Authorization": "tok1"}, ""},
		"key":      {harness.AuthForm{Name: "key"}, map[string]string{"Authorization": "Bearer sk-k1"}, ""},
		"headers":  {harness.AuthForm{Name: "headers"}, map[string]string{"Authorization": "tok1"}, ""},
		"session":  {harness.AuthForm{Name: "session"}, map[string]string{"Cookie": "session=s1"}, ""},
		"pin":      {harness.AuthForm{Name: "pin", Bearer: "{key}-{channel_id}"}, map[string]string{"Authorization": "Bearer sk-k1-7"}, ""},
		"mixed":    {harness.AuthForm{Name: "m", Headers: map[string]string{"Authorization": "{header.Authorization}", "X-User": "{own.user_id}"}}, map[string]string{"Authorization": "tok1", "X-User": "1"}, ""},
		"no cred":  {harness.AuthForm{Name: "cookie"}, nil, `no credential "cookie"`},
		"no value": {harness.AuthForm{Name: "t", Bearer: "{key}-{token_id}"}, nil, "{token_id}"},
	} {
		got, why := FormHeaders(r, c.form, caller, v)
		if c.why != "" {
			assert.Contains(t, why, c.why, name)
			continue
		}
		assert.Empty(t, why, name)
		assert.Equal(t, c.want, got, name)
	}
	_, why := FormHeaders(r, harness.AuthForm{Name: "headers"}, harness.GatewayAccess{Key: "k"}, v)
	assert.Contains(t, why, "no headers")

	f, why := RouteCall{Route: harness.Route{Method: "GET", Path: "/c/{channel_id}"}, Form: harness.AuthForm{Name: "key"}, Query: "?u={own.user_id}", Caller: caller, Values: v}.Fill()
	assert.Empty(t, why)
	assert.Equal(t, "/c/7?u=1", f.Path)
	assert.Equal(t, "session-token", credentialValue("session=session-token"))
	assert.Equal(t, "abc", credentialValue("Bearer abc"))
}
