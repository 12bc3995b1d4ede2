package certificate

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/scenarios"
)

func shardOf(k, n int, reports ...scenarios.Report) *Certificate {
	c := sample(reports...)
	c.Shard = &Shard{K: k, N: n}
	return c
}

func TestMergeJoinsShards(t *testing.T) {
	t.Parallel()
	// Catalog a b c d e in 2 shards: 1/2 has a c e, 2/2 has b d.
	s1 := shardOf(1, 2, passing("a"), passing("c"), skipped("e"))
	s2 := shardOf(2, 2, passing("b"), leaking("d"))
	power := &DetectionPower{Caught: 13, Seeded: 13}
	s2.DetectionPower = power
	s1.Duration, s2.Duration = 5e9, 7e9
	s2.Error = "something went wrong after"
	m, err := Merge([]*Certificate{s2, s1})
	require.NoError(t, err)
	var ids []string
	for _, r := range m.Scenarios {
		ids = append(ids, r.ID)
	}
	require.Equal(t, []string{"a", "b", "c", "d", "e"}, ids)
	require.Equal(t, Leaks, m.Verdict, "the worst shard's verdict")
	require.Same(t, power, m.DetectionPower, "from the shard that measured it")
	require.Equal(t, int64(7e9), int64(m.Duration), "the longest shard")
	require.Equal(t, "shard 2/2: something went wrong after", m.Error)
	require.Nil(t, m.Shard)

	// Certified shards certify the whole; failure is worse than certified.
	m, err = Merge([]*Certificate{shardOf(1, 2, passing("a")), shardOf(2, 2, passing("b"))})
	require.NoError(t, err)
	require.Equal(t, Certified, m.Verdict)
	require.Nil(t, m.DetectionPower, "nobody measured it: the merge says not measured")
	m, err = Merge([]*Certificate{shardOf(1, 2, passing("a")), shardOf(2, 2, failing("b"))})
	require.NoError(t, err)
	require.Equal(t, Failed, m.Verdict)
	// Every shard skipped everything: nothing is certified.
	m, err = Merge([]*Certificate{shardOf(1, 2, skipped("a")), shardOf(2, 2, skipped("b"))})
	require.NoError(t, err)
	require.Equal(t, Failed, m.Verdict)
}

func TestMergeRefusesWhatIsNotOneRun(t *testing.T) {
	t.Parallel()
	notShard := sample(passing("a"))
	otherTarget := shardOf(2, 2, passing("b"))
	otherTarget.Target.Version = "agentd/9"
	otherBuild := shardOf(2, 2, passing("b"))
	otherBuild.Tool.Commit = "ffffffffffffffffffffffffffffffffffffffff"
	otherRun := shardOf(2, 2, passing("b"))
	otherRun.Shard.Run = "^b$"
	for name, tc := range map[string]struct {
		certs []*Certificate
		want  string
	}{
		"none":         {nil, "no certificates"},
		"not a shard":  {[]*Certificate{notShard}, "certificate 1 is not a shard"},
		"missing":      {[]*Certificate{shardOf(1, 3, passing("a")), shardOf(3, 3, passing("c"))}, "shard 2/3 missing"},
		"twice":        {[]*Certificate{shardOf(1, 2, passing("a")), shardOf(1, 2, passing("a"))}, "shard 1/2 given twice"},
		"mixed N":      {[]*Certificate{shardOf(1, 2, passing("a")), shardOf(2, 3, passing("b"))}, "certificate 2 is shard 2/3"},
		"other run":    {[]*Certificate{shardOf(1, 2, passing("a")), otherRun}, `of --run "^b$"`},
		"other target": {[]*Certificate{shardOf(1, 2, passing("a")), otherTarget}, "agentd/9"},
		"other build":  {[]*Certificate{shardOf(1, 2, passing("a")), otherBuild}, "ran harness"},
	} {
		_, err := Merge(tc.certs)
		require.ErrorIs(t, err, ErrShards, name)
		require.ErrorContains(t, err, tc.want, name)
	}
}
