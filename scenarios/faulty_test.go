package scenarios

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness/attack"
)

// TestFaultyRunsOnlyItsFaultsChains: a faulty run of hostile-chains runs
// the chains its fault re-opens, and every chain fault of the self-test
// has at least one, so no faulty run is left with nothing that catches it.
func TestFaultyRunsOnlyItsFaultsChains(t *testing.T) {
	t.Parallel()
	chains := attack.Chains()
	for _, f := range Faults() {
		if !chainsScenario(f) {
			continue
		}
		run := faultyRun{stopOn: f.Expect, fault: f.Name}
		n := 0
		for _, ch := range chains {
			if chainScenario(ch) == f.Scenario && run.runsChain(ch) {
				n++
			}
		}
		require.Positive(t, n, "fault %s re-opens no chain of %s: its faulty run would run none", f.Name, f.Scenario)
	}
	// Outside a faulty run, every chain runs.
	for _, ch := range chains {
		require.True(t, faultyRun{}.runsChain(ch), ch.ID)
	}
	combo := faultyRun{fault: "workdir-anywhere,no-tool-sandbox"}
	for _, ch := range chains {
		require.Equal(t, ch.ControlFaults() == combo.fault, combo.runsChain(ch), ch.ID)
	}
}
