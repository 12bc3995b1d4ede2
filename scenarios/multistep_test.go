package scenarios

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/tenantcanary/tenantcanary/harness/attack"
)

// checkChainDetections: in each fault's run of hostile-chains (the
// self-test's), every chain row that fault re-opens finds its own leak: a
// finding of the row's expected invariant whose evidence is the row's own
// (Report.Chains: the requests, frames and files of the time it ran that
// it caused itself: see attributeChains). A row that
// did not run, or was not found, fails the test by name. A row that
// another of agentd's defences still stops (Chain.OtherDefence) must not be
// found by its fault alone (were it found, the reason it gives would be
// stale), and must be found with that defence off too (Chain.AlsoFault,
// a run of both faults); with no fault of agentd for it, its positive
// control is elsewhere: agentd v0.3.0's run
// (examples/targets/agentd-v0.3.0/ci.sh) or a test of the effect itself.
// Only the rows of faults are checked (every fault of the chains in the
// full self-test). The clean run is TestCatalogAgainstAgentd/hostile-chains.
func checkChainDetections(t *testing.T, faulty map[string]Report, faults []string) {
	t.Helper()
	for _, ch := range attack.Chains() {
		if !slices.Contains(faults, ch.Fault) {
			continue
		}
		rep, ok := faulty[ch.Fault]
		if !assert.True(t, ok, "row %s: the self-test ran no %s", ch.ID, ch.Fault) {
			continue
		}
		assert.Equal(t, "hostile-chains", rep.ID, ch.Fault)
		i := slices.IndexFunc(rep.Chains, func(r ChainRow) bool { return r.Row == ch.ID })
		if !assert.GreaterOrEqual(t, i, 0, "row %s did not run in the %s run of hostile-chains", ch.ID, ch.Fault) {
			continue
		}
		row := rep.Chains[i]
		found := slices.Contains(row.Found, ch.Expect)
		if ch.OtherDefence == "" {
			if !found && strings.Contains(row.Outcome, "Permission denied") {
				// A system folder the tests' user cannot write (CI runs them
				// unprivileged): the machine stopped the row, not agentd.
				t.Logf("row %s: not judged: the tests' user may not write there (%s)", ch.ID, row.Outcome)
				continue
			}
			assert.True(t, found, "row %s (%s against %s) was not found by %s with %s on: found %v; it ended: %s",
				ch.ID, row.Attacker, row.Victim, ch.Expect, ch.Fault, row.Found, row.Outcome)
			continue
		}
		assert.False(t, found, "row %s was found by %s with %s on, though another defence should stop it (%s): drop its OtherDefence", ch.ID, ch.Expect, ch.Fault, ch.OtherDefence)
		if ch.AlsoFault == "" {
			t.Logf("row %s: not on agentd (%s); its positive control is elsewhere (agentd v0.3.0's run, a test of its effect)", ch.ID, ch.OtherDefence)
			continue
		}
		both, ok := faulty[ch.ControlFaults()]
		if !assert.True(t, ok, "row %s: the self-test ran no %s (its positive control)", ch.ID, ch.ControlFaults()) {
			continue
		}
		i = slices.IndexFunc(both.Chains, func(r ChainRow) bool { return r.Row == ch.ID })
		if assert.GreaterOrEqual(t, i, 0, "row %s did not run in the %s run of hostile-chains", ch.ID, ch.ControlFaults()) {
			row = both.Chains[i]
			assert.True(t, slices.Contains(row.Found, ch.Expect), "row %s (%s against %s) was not found by %s with %s on (%s switches off: %s): found %v; it ended: %s",
				ch.ID, row.Attacker, row.Victim, ch.Expect, ch.ControlFaults(), ch.AlsoFault, ch.OtherDefence, row.Found, row.Outcome)
		}
	}
	for _, a := range faulty[attack.FaultDeleteRace].Chains {
		if a.Row == "race-delete-recreate" {
			t.Logf("%s: %s", a.Row, a.Outcome)
		}
	}
}
