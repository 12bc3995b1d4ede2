package docclone

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A copy shares nothing that can change: changing it, at any depth, leaves
// the original as it was.
func TestMapSharesNothingChangeable(t *testing.T) {
	t.Parallel()
	orig := map[string]any{"a": "x", "n": 1.5, "m": map[string]any{"k": []any{"v", map[string]any{"deep": true}}}, "nil": nil}
	want := map[string]any{"a": "x", "n": 1.5, "m": map[string]any{"k": []any{"v", map[string]any{"deep": true}}}, "nil": nil}
	c := Map(orig)
	require.Equal(t, want, c)
	c["a"] = "changed"
	c["m"].(map[string]any)["k"].([]any)[0] = "changed"
	c["m"].(map[string]any)["k"].([]any)[1].(map[string]any)["deep"] = false
	c["m"].(map[string]any)["new"] = 1
	require.Equal(t, want, orig)
	require.Nil(t, Map(nil))
}
