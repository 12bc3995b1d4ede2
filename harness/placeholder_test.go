package harness

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/internal/placeholder"
)

// TestFillersAgreeWithThePlaceholderEngine: the fillers and vocabularies
// still written in this package (gwtarget.go's RoutePlaceholders and its
// route rule) do what internal/placeholder does, until they are replaced
// by it; the dialect's config and hooks are filled and checked by it.
func TestFillersAgreeWithThePlaceholderEngine(t *testing.T) {
	t.Parallel()
	assert.Equal(t, placeholder.SharedConfig.Names(), SharedConfigVars)

	for _, s := range []string{"/v1/sessions/{session_id}/files/{file_id}", "{a}{b} {A} {x9_y}", "/v1/{session}"} {
		assert.Equal(t, placeholder.Names(s), RoutePlaceholders(s), s)
	}
	for _, name := range []string{"session_id", "file_id", "session", "id"} {
		// gwtarget.go's rule: a route's placeholder ends in _id.
		rule := len(name) > len("_id") && name[len(name)-3:] == "_id"
		assert.Equal(t, rule, placeholder.Route.Has(name), name)
	}

	// A target's command line is checked by the engine: a near miss
	// ({Root}) is refused, a JSON argument is no placeholder.
	tg := AgentdTarget("agentd")
	tg.Serve = []string{"agentd", "serve", "--root", "{Root}", `{"json": 1}`}
	err := tg.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `argument "{Root}": unknown placeholder(s) {Root} in a command line`)
	assert.NotContains(t, err.Error(), "json")

	// Expand is the engine's: a name vars lacks stays.
	assert.Equal(t, []string{"srv", "127.0.0.1:{port}"}, Expand([]string{"srv", "{host}:{port}"}, map[string]string{"host": "127.0.0.1"}))
}
