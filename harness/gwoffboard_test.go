package harness

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGatewayRound2Validation: deprovision, url_fields and the store's
// owner-only and id-giving places are checked when a target is loaded.
func TestGatewayRound2Validation(t *testing.T) {
	t.Parallel()
	ok := func() Target {
		tg := gatewayTarget()
		tg.LLMGateway.Deprovision = []string{"provision", "--off"}
		tg.LLMGateway.Routes = []Route{{Name: "fetch", Method: "POST", Path: "/f", URLFields: []string{"image.url", "?callback"}}}
		tg.LLMGateway.Store = &Store{SQLite: "{root}/db", Places: []StorePlace{
			{Table: "tokens", Column: "key", OwnerColumn: "user_id", OwnerID: "user"},
			{Table: "logs", OwnerColumn: "user_id", OwnerID: "user", IDColumn: "id", ID: "log"},
		}}
		return tg
	}
	good := ok()
	require.NoError(t, good.Validate())
	assert.True(t, good.LLMGateway.Store.Places[1].OwnerOnly())
	assert.False(t, good.LLMGateway.Store.Places[0].OwnerOnly())
	requireInvalid(t, ok, map[string]invalidEdit{
		"deprovision alone": {func(t *Target) { t.LLMGateway.Provision = nil; t.LLMGateway.Access = &AccessTemplate{Key: "k"} }, "deprovision needs provision"},
		"empty url field":   {func(t *Target) { t.LLMGateway.Routes[0].URLFields = []string{"?"} }, `url_fields "?"`},
		"dotted url field":  {func(t *Target) { t.LLMGateway.Routes[0].URLFields = []string{"a."} }, `url_fields "a."`},
		"id without column": {func(t *Target) { t.LLMGateway.Store.Places[1].IDColumn = "" }, "id_column and id together"},
		"id with _id":       {func(t *Target) { t.LLMGateway.Store.Places[1].ID = "log_id" }, "without _id"},
		"no owner":          {func(t *Target) { t.LLMGateway.Store.Places[1].OwnerColumn = "" }, "owner_column"},
	})
}

// TestURLFieldsAreCheckedAtLoad: a url field that names an array of the
// route's body as a mapping is refused when the file loads, with the fix;
// indexed, it loads.
func TestURLFieldsAreCheckedAtLoad(t *testing.T) {
	t.Parallel()
	body := `{"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x.invalid/a.png"}}]}]}`
	g := &LLMGateway{Routes: []Route{{Name: "vision", Method: "POST", Path: "/v1/chat/completions", Body: body, URLFields: []string{"messages.content.image_url.url"}}}}
	errs := g.validateRound2()
	require.Len(t, errs, 1)
	require.ErrorContains(t, errs[0], "index it as messages[]")
	g.Routes[0].URLFields = []string{"messages[].content[].image_url.url"}
	require.Empty(t, g.validateRound2())
}
