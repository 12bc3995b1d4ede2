package certify

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/scenarios"
)

// TestSelection: Run, then Shard, then Short pick the scenarios, and the
// regexp the catalog gets selects exactly them.
func TestSelection(t *testing.T) {
	t.Parallel()
	all := scenarios.Default().IDs()
	for _, id := range shortScenarios {
		require.Contains(t, all, id, "the short subset names catalog scenarios")
	}
	for _, tc := range []struct {
		name string
		opts Options
		want []string
	}{
		{"short", Options{Short: true}, []string{"pooled-serve", "tenant-authz", "settings-writes", "concurrent-turns"}},
		{"short of a run", Options{Short: true, Run: "^(tenant-authz|hostile-tools)$"}, []string{"tenant-authz"}},
		{"run", Options{Run: "^(tenant-authz|hostile-tools)$"}, nil},
		{"shard", Options{Run: "^(stdio-separate|gateway|shell-reuse)$", Shard: "2/2"}, []string{"gateway"}},
	} {
		sel, err := tc.opts.selectScenarios()
		require.NoError(t, err, tc.name)
		specs, err := scenarios.Default().Match(sel.run)
		require.NoError(t, err, tc.name)
		var got []string
		for _, s := range specs {
			got = append(got, s.ID)
		}
		require.Equal(t, sel.ids, got, "%s: the regexp selects exactly the IDs", tc.name)
		if tc.want != nil {
			// In catalog order, whatever the order of shortScenarios.
			require.ElementsMatch(t, tc.want, sel.ids, tc.name)
		}
	}
	_, err := Options{Run: "("}.selectScenarios()
	require.ErrorContains(t, err, "error parsing regexp")
	_, err = Options{Shard: "3/2"}.selectScenarios()
	require.ErrorContains(t, err, "want K/N")
}

// TestOptionsDefaults: the zero Options run 3 tenants, AutoParallel at a
// time; out-of-range values are refused, each named.
func TestOptionsDefaults(t *testing.T) {
	t.Parallel()
	var o Options
	require.NoError(t, o.check())
	require.Equal(t, 3, o.Tenants)
	require.Equal(t, scenarios.AutoParallel(), o.Parallel)
	require.Equal(t, "certify", o.Name)
	bad := Options{Tenants: 101, Parallel: -1, Timeout: -1, OnlySelfTest: true, Run: "x"}
	err := bad.check()
	require.ErrorIs(t, err, ErrOptions)
	for _, want := range []string{"Tenants 101: want 2 to 100", "Parallel -1", "Timeout -1ns", "OnlySelfTest"} {
		require.ErrorContains(t, err, want)
	}
}
