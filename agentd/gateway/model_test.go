package gateway

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
)

// TestAForeignModelIsRefusedBeforeAnythingRuns: a profile serves its own
// model (named, aliased or left out); any other is a 404 and reaches no
// provider. With the seeded fault gateway-any-model it is served.
func TestAForeignModelIsRefusedBeforeAnythingRuns(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	close(release)
	hs, llm, _ := newGateway(t, release)
	url := hs.URL + "/p/busy/v1/chat/completions"
	for _, model := range []string{"m", ModelAlias, ""} {
		r := postModel(t, url, "gw-key", model, false)
		require.Equal(t, http.StatusOK, r.status, "model %q: %s", model, r.body)
	}
	served := len(llm.Requests())
	for _, stream := range []bool{false, true} {
		r := postModel(t, url, "gw-key", "model-of-another-profile", stream)
		require.Equal(t, http.StatusNotFound, r.status, r.body)
		require.Contains(t, r.body, "model_not_found")
	}
	require.Len(t, llm.Requests(), served, "a refused model reaches no provider")

	faulty, _, _ := newGateway(t, release, faults.GatewayAnyModel)
	r := postModel(t, faulty.URL+"/p/busy/v1/chat/completions", "gw-key", "model-of-another-profile", false)
	require.Equal(t, http.StatusOK, r.status, "the seeded fault serves it: %s", r.body)
}
