package invariants

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCollapseFoldsOnePlace: findings with a Place fold into one per
// invariant, place, owner and tenant, with a count that survives a second
// Dedup; others fold only when identical, without a count.
func TestCollapseFoldsOnePlace(t *testing.T) {
	t.Parallel()
	route := func(tenant, owner, path, detail string) Finding {
		return Finding{Invariant: Authz, Tenant: tenant, Owner: owner, Place: `route "r"`,
			Where: Where{Label: `route "r"`, Path: path}, Detail: detail}
	}
	plain := Finding{Invariant: Text, Tenant: "alpha", Owner: "beta", Where: Where{Label: "log"}}
	fs := []Finding{
		route("alpha", "beta", "/t/2", "not refused"),
		plain,
		route("alpha", "beta", "/t/3", "carries data"),
		route("alpha", "gamma", "/t/3", "not refused"),
		plain,
		route("alpha", "beta", "/t/2", "not refused"),
		{Invariant: Routing, Tenant: "alpha", Owner: "beta", Place: `route "r"`},
	}
	got := Dedup(fs)
	require.Len(t, got, 4)
	assert.Equal(t, 3, got[0].Count)
	assert.Equal(t, "/t/2", got[0].Where.Path, "the first one is kept")
	assert.Contains(t, got[0].String(), "(seen 3 times)")
	assert.Zero(t, got[1].Count, "identical findings without a place fold without a count")
	assert.Zero(t, got[2].Count)
	assert.NotContains(t, got[2].String(), "seen")
	assert.Equal(t, Routing, got[3].Invariant, "another invariant is another finding")

	again := Dedup(append(append([]Finding(nil), got...), got[0]))
	require.Len(t, again, 4)
	assert.Equal(t, 6, again[0].Count, "counts add up")
	assert.Equal(t, got, Dedup(got), "a list without repeats is unchanged")
}
