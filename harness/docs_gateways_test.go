package harness

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGatewayDocsWorkedExampleLoads keeps the worked example of
// docs/gateways.md (a target file with deprovision, several credential
// forms and a chain) loadable by the target loader, with the fields it
// shows.
func TestGatewayDocsWorkedExampleLoads(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/gateways.md")
	require.NoError(t, err)
	var block string
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(doc), -1) {
		if strings.Contains(m[1], "name: acme-gw") {
			block = m[1]
		}
	}
	require.NotEmpty(t, block, "the worked example's target file (name: acme-gw) is in docs/gateways.md")
	path := filepath.Join(t.TempDir(), "acme.yaml")
	require.NoError(t, os.WriteFile(path, []byte(block), 0o644))
	tg, err := LoadTarget(path)
	require.NoError(t, err)
	require.True(t, tg.IsGateway())
	g := tg.LLMGateway
	assert.Equal(t, []string{"acme-provision", "off"}, g.Deprovision)
	byName := map[string]Route{}
	for _, r := range g.Routes {
		byName[r.Name] = r
	}
	own := byName["own profile"]
	require.Len(t, own.CredentialForms(), 3)
	assert.True(t, own.NamesForeignIDs(), "the user-id header form is a cross-tenant probe")
	assert.Equal(t, map[string]string{"made_key": "$.data.id"}, byName["make a key"].Capture)
	assert.True(t, byName["made key"].NamesForeignIDs())
	assert.Len(t, byName["own usage"].Variants, 2)
	require.NotNil(t, g.Store)
	assert.True(t, g.Store.Places[3].OwnerOnly())
}
