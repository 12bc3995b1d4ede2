package certificate

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The console table and summary.md say why every scenario that did not
// pass failed (its first lines), and carry the run's seed.
func TestWhyAndSeedOnConsoleAndSummary(t *testing.T) {
	t.Parallel()
	f := failing("b")
	f.Log = []string{"turn of alpha: rpc error 4030: session belongs to another connection\nsecond line", "third", "fourth"}
	c := sample(passing("a"), f, leaking("c"), skipped("d"))
	c.Seed = 1234567

	assert.Nil(t, Why(&c.Scenarios[0]), "a pass has no why")
	assert.Nil(t, Why(&c.Scenarios[3]), "a skip has no why (its reason is listed with the skipped checks)")
	assert.Equal(t, []string{"turn of alpha: rpc error 4030: session belongs to another connection", "second line", "third"}, Why(&c.Scenarios[1]))
	noLog := failing("e")
	assert.Equal(t, []string{noLog.Reason}, Why(&noLog), "no log: the reason")

	var table bytes.Buffer
	require.NoError(t, c.WriteTable(&table))
	assert.Contains(t, table.String(), "why b: turn of alpha: rpc error 4030")
	assert.Contains(t, table.String(), "why c: phase cron: 2 leaks")
	assert.NotContains(t, table.String(), "fourth", "only the first lines")
	assert.Contains(t, table.String(), "seed: 1234567 (replay with --seed 1234567)")

	var md bytes.Buffer
	require.NoError(t, c.WriteMarkdown(&md))
	assert.Contains(t, md.String(), "### Why scenarios did not pass (first lines) (4)")
	assert.Contains(t, md.String(), "- b: `second line`")
	assert.Contains(t, md.String(), "`canary-run --seed 1234567` replays them")
	assert.False(t, strings.Contains(md.String(), "- a: "), "a pass has no why line")

	var js bytes.Buffer
	require.NoError(t, c.WriteJSON(&js))
	back, err := ReadJSON(&js)
	require.NoError(t, err)
	assert.Equal(t, uint64(1234567), back.Seed, "the seed round-trips through certificate.json")
}
