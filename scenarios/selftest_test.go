package scenarios

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness/attack"
)

// The detection-power matrix: every seeded fault of agentd is caught by the
// invariant that should catch it, and the same scenarios are clean with no
// fault. A certification that has never failed proves nothing.
func TestSelfTestCatchesEverySeededFault(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	res, err := SelfTest(ctx, Default(), Config{Target: agentdTarget(), Tenants: 3, WorkDir: t.TempDir(), Parallel: 2}, Faults())
	require.NoError(t, err)
	var table bytes.Buffer
	require.NoError(t, WriteSelfTestTable(&table, res))
	t.Logf("\n%s", table.String())
	require.Len(t, res.Outcomes, len(Faults()))
	for _, o := range res.Outcomes {
		assert.True(t, o.Caught, "%s missed by %s (expected %s, saw %v): %s", o.Fault, o.Scenario, o.Expected, o.Seen, o.Error)
		assert.True(t, o.Clean, "clean run of %s", o.Scenario)
	}
	for _, r := range res.Clean {
		assert.Equal(t, Pass, r.Result, "%s: %v", r.ID, r.Log)
	}
	assert.True(t, res.Passed())
	checkChainDetections(t, res.Faulty, attack.ChainFaults)
}

func TestFaultCatalogIsValid(t *testing.T) {
	t.Parallel()
	require.NoError(t, validateFaults(Default(), Faults()))
	err := validateFaults(Default(), []Fault{{Name: "x", Scenario: "nope", Expect: "request"}, {Name: "x", Scenario: "gateway", Expect: "harness"}})
	assert.ErrorContains(t, err, `fault "x" listed twice`)
	assert.ErrorContains(t, err, `unknown scenario "nope"`)
	assert.ErrorContains(t, err, "is not a leak check")
}
