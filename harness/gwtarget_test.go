package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gatewayTarget is a valid gateway target: its command takes {port}, and
// the tenants are provisioned.
func gatewayTarget() Target {
	return Target{Name: "gw", Kind: KindGateway, Gateway: []string{"gw", "--port", "{port}"},
		LLMGateway: &LLMGateway{Provision: []string{"provision"}}}
}

// invalidEdit is an edit that makes a valid target invalid, and what the
// validation error then says.
type invalidEdit struct {
	edit func(*Target)
	want string
}

// requireInvalid: each edit, of a target ok makes, fails validation with
// an error saying its want.
func requireInvalid(t *testing.T, ok func() Target, edits map[string]invalidEdit) {
	t.Helper()
	for name, c := range edits {
		tg := ok()
		c.edit(&tg)
		err := tg.Validate()
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), c.want, name)
	}
}

func TestGatewayTargetValidation(t *testing.T) {
	t.Parallel()
	ok := gatewayTarget
	good := ok()
	require.NoError(t, good.Validate())
	ok2, why := good.Supports(BackendGateway)
	assert.True(t, ok2, why)
	ok2, _ = good.Supports(BackendServe)
	assert.False(t, ok2)

	portless := ok()
	portless.Gateway, portless.ReadyLine = []string{"gw"}, `listening on :(\d+)`
	require.NoError(t, portless.Validate(), "a ready line naming the port will do")

	requireInvalid(t, ok, map[string]invalidEdit{
		"bad kind":         {func(t *Target) { t.Kind = "proxy" }, `kind "proxy"`},
		"with serve":       {func(t *Target) { t.Serve = []string{"x"}; t.TokenVar = "T" }, "takes no stdio, serve or url"},
		"no block":         {func(t *Target) { t.LLMGateway = nil }, "needs an llm_gateway block"},
		"no way in":        {func(t *Target) { t.LLMGateway.Provision = nil }, "give provision"},
		"no port":          {func(t *Target) { t.Gateway = []string{"gw"} }, "has no {port}"},
		"no command":       {func(t *Target) { t.Gateway = nil }, "needs gateway"},
		"bad placeholder":  {func(t *Target) { t.LLMGateway.Routes = []Route{{Name: "r", Path: "/t/{token}"}} }, "placeholder {token}"},
		"relative path":    {func(t *Target) { t.LLMGateway.Routes = []Route{{Name: "r", Path: "t"}} }, "want an absolute path"},
		"bad auth":         {func(t *Target) { t.LLMGateway.Routes = []Route{{Name: "r", Path: "/t", Auth: "cookie"}} }, "auth \"cookie\""},
		"bad success":      {func(t *Target) { t.LLMGateway.Routes = []Route{{Name: "r", Path: "/t", Success: "("}} }, "success"},
		"store no places":  {func(t *Target) { t.LLMGateway.Store = &Store{SQLite: "{root}/db"} }, "no places"},
		"store bad place":  {func(t *Target) { t.LLMGateway.Store = &Store{SQLite: "{root}/db", Places: []StorePlace{{Table: "t"}}} }, "want table, column"},
		"provision, agent": {func(t *Target) { t.Kind = ""; t.Stdio = []string{"x"} }, "needs kind: gateway"},
	})
}

func TestRouteSucceeded(t *testing.T) {
	t.Parallel()
	r := Route{Name: "r", Path: "/t", Success: `"success":\s*true`}
	assert.True(t, r.Succeeded(200, []byte(`{"success": true}`)))
	assert.False(t, r.Succeeded(200, []byte(`{"success": false}`)), "a 200 refusal")
	assert.False(t, r.Succeeded(403, []byte(`{"success": true}`)))
	plain := Route{Name: "r", Path: "/t"}
	assert.True(t, plain.Succeeded(204, nil))
	assert.Equal(t, []string{"token_id", "user_id"}, RoutePlaceholders("/a/{token_id}?u={user_id}"))
}

// TestLoadGatewayTargetExample loads the test gateway's target file and
// resolves known_findings beside it.
func TestLoadGatewayTargetExample(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile("../scenarios/testdata/testgw/target.yaml")
	require.NoError(t, err)
	dir := t.TempDir()
	path := filepath.Join(dir, "gw.yaml")
	require.NoError(t, os.WriteFile(path, []byte(strings.ReplaceAll(string(text), "BIN", "/bin/testgw")+"known_findings: known.yaml\n"), 0o644))
	tg, err := LoadTarget(path)
	require.NoError(t, err)
	assert.True(t, tg.IsGateway())
	assert.Equal(t, filepath.Join(dir, "known.yaml"), tg.KnownFindings)
	require.NotNil(t, tg.LLMGateway.Store)
	assert.GreaterOrEqual(t, len(tg.LLMGateway.Routes), 9)
	assert.NotEmpty(t, tg.LLMGateway.Deprovision)
	assert.Equal(t, "GET", tg.LLMGateway.Routes[0].Method, "the default method")

	require.NoError(t, os.WriteFile(path, []byte(strings.ReplaceAll(string(text), "ready_path:", "ready_paht:")), 0o644))
	_, err = LoadTarget(path)
	assert.ErrorContains(t, err, "ready_paht", "an unknown field is refused")
}
