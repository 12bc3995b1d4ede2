package faults

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFromEnv(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	s, err := FromEnv(env(nil))
	require.NoError(t, err)
	require.Empty(t, s)
	_, err = FromEnv(env(map[string]string{"AGENTD_FAULTS": "shared-shell"}))
	require.ErrorIs(t, err, ErrNotAllowed)
	_, err = FromEnv(env(map[string]string{"AGENTD_FAULTS": "shared-shel", "AGENTD_ALLOW_FAULTS": "1"}))
	require.ErrorIs(t, err, ErrUnknown)
	require.ErrorContains(t, err, "shared-shell", "the error lists the known names")
	s, err = FromEnv(env(map[string]string{"AGENTD_FAULTS": " shared-shell, model-bleed ,", "AGENTD_ALLOW_FAULTS": "1"}))
	require.NoError(t, err)
	require.True(t, s.Has(SharedShell))
	require.True(t, s.Has(ModelBleed))
	require.False(t, s.Has(GlobalCwd))
	require.Equal(t, []string{"model-bleed", "shared-shell"}, s.Names())
	seen := map[Name]bool{}
	for _, n := range append(append(All(), detectFaults()...), surfaceFaults()...) {
		seen[n] = true
		got, err := Parse(string(n))
		require.NoError(t, err, "every listed fault parses")
		require.True(t, got.Has(n))
	}
	require.Len(t, seen, len(All()), "All lists every fault, each once")
}
