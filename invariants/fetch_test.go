package invariants

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFetchLeaks: a fetched URL and a body handed back are each a Fetch
// finding; a probe the gateway ignored is none.
func TestFetchLeaks(t *testing.T) {
	t.Parallel()
	p := FetchProbe{Tenant: "alpha", Where: Where{Label: `route "fetch"`, Part: "field url"}, URL: "http://127.0.0.1:1/canary-fetch/alpha/1",
		Body: "fetched_body-alpha-0123456789", Reply: []byte(`{"success": false}`)}
	assert.Empty(t, FetchLeaks(p), "ignored URL")
	p.Hits = 1
	fs := FetchLeaks(p)
	require.Len(t, fs, 1)
	assert.Equal(t, Fetch, fs[0].Invariant)
	assert.Contains(t, fs[0].Detail, "fetched the loopback URL")
	p.Reply = []byte(`{"data": "fetched_body-alpha-0123456789"}`)
	fs = FetchLeaks(p)
	require.Len(t, fs, 2)
	assert.Contains(t, fs[1].Detail, "came back to alpha")
	assert.True(t, fs[1].Invariant.Leak())
}
