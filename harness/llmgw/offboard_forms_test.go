package llmgw

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
)

// TestOffboardCredentialsOfPrinted: each credential the provisioner
// printed is a form of its own, and its long values alone as bearer
// tokens, unless another form sends the same headers.
func TestOffboardCredentialsOfPrinted(t *testing.T) {
	t.Parallel()
	a := harness.GatewayAccess{Key: "sk-0123456789abcdef", Headers: map[string]string{"Authorization": "Bearer access-0123456789abcdef"},
		Credentials: map[string]map[string]string{
			"session": {"Cookie": "session=access-0123456789abcdef"},
			"other":   {"X-Api-Token": "other-0123456789abcdef"},
			"empty":   {},
		}}
	var names []string
	for _, c := range CredentialsOf(a) {
		names = append(names, c.Name)
	}
	// The cookie's value as a bearer is the management headers: given once.
	assert.Equal(t, []string{"gateway key", "management headers", "credential other", "credential other (X-Api-Token) as a bearer token", "credential session"}, names)
}

// TestOffboardRouteProbes: a route's declared forms (a template filled with the
// caller's own ids) come first, with the controls of a read route; every
// other credential form follows; the same request is given once; a form
// the provisioner printed nothing for is a reason; a route whose ids the
// tenant lacks gives nothing.
func TestOffboardRouteProbes(t *testing.T) {
	t.Parallel()
	a := harness.GatewayAccess{Key: "sk-0123456789abcdef", Headers: map[string]string{"Authorization": "Bearer access-0123456789abcdef"},
		Credentials: map[string]map[string]string{"session": {"Cookie": "session=access-0123456789abcdef"}},
		IDs:         map[string]string{"channel": "4", "token": "7"}}
	pin := harness.Route{Name: "pinned chat", Method: "POST", Path: "/v1/chat/completions", Body: `{"model": "m"}`,
		Forms: harness.AuthForms{{Name: "pin", Bearer: "{key}-{channel_id}", Own: "any"}}}
	ps, skipped := RouteProbes(pin, a, a.IDs)
	assert.Empty(t, skipped)
	require.Len(t, ps, 4)
	assert.Equal(t, `auth form "pin"`, ps[0].Form)
	assert.Equal(t, "Bearer sk-0123456789abcdef-4", ps[0].Call.Headers["Authorization"])
	assert.False(t, ps[0].Control, "not a read route")
	assert.Equal(t, []string{"gateway key", "management headers", "credential session"}, []string{ps[1].Form, ps[2].Form, ps[3].Form})
	assert.Equal(t, "/v1/chat/completions", ps[1].Call.Path)

	read := harness.Route{Name: "own token", Method: "GET", Path: "/api/token/{token_id}", Read: true,
		Forms: harness.AuthForms{{Name: "headers"}, {Name: "session"}, {Name: "missing"}}}
	ps, skipped = RouteProbes(read, a, a.IDs)
	require.Len(t, skipped, 1)
	assert.Contains(t, skipped[0], `credentials.missing`)
	require.Len(t, ps, 3)
	for _, p := range ps {
		assert.Equal(t, "/api/token/7", p.Call.Path)
	}
	assert.Equal(t, "management headers", ps[0].Form)
	assert.True(t, ps[0].Control)
	assert.Equal(t, "credential session", ps[1].Form)
	assert.True(t, ps[1].Control)
	assert.Equal(t, "gateway key", ps[2].Form)
	assert.False(t, ps[2].Control, "a form the route does not declare is no control")

	ps, skipped = RouteProbes(harness.Route{Name: "row", Path: "/api/log/{log_id}", Read: true}, a, a.IDs)
	assert.Empty(t, ps)
	assert.Empty(t, skipped)
}
