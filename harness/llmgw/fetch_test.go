package llmgw

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFetchListenerRecordsRequests: a hit keeps what the gateway sent
// along (query, headers, body), and Content carries all of it, so another
// tenant's data in a webhook's request can be scanned for.
func TestFetchListenerRecordsRequests(t *testing.T) {
	t.Parallel()
	l, err := NewFetchListener()
	require.NoError(t, err)
	defer l.Close()
	u := l.URL("alpha", "hook", "ok")
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, u+"?user=beta-query", strings.NewReader(`{"last_log": "model-beta-0123456789"}`))
	require.NoError(t, err)
	req.Header.Set("X-Caller", "sk-beta-header-0123456789")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	hits := l.HitsOn(u)
	require.Len(t, hits, 1)
	h := hits[0]
	assert.Equal(t, http.MethodPost, h.Method)
	assert.Equal(t, "user=beta-query", h.Query)
	assert.Equal(t, "sk-beta-header-0123456789", h.Header.Get("X-Caller"))
	assert.JSONEq(t, `{"last_log": "model-beta-0123456789"}`, string(h.Body))
	c := string(h.Content())
	for _, want := range []string{"beta-query", "X-Caller: sk-beta-header-0123456789", "model-beta-0123456789"} {
		assert.Contains(t, c, want)
	}
	assert.Equal(t, c, string(h.Content()), "the same text every time")
}
