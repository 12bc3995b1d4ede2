package scenarios

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
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
func checkChainDetections(t *testing.T, runs faultyRuns, faults []string) {
	t.Helper()
	for _, ch := range attack.Chains() {
		if !slices.Contains(faults, ch.Fault) {
			continue
		}
		scenario := chainScenario(ch)
		faulty := runs[scenario]
		rep, ok := faulty[ch.Fault]
		if !assert.True(t, ok, "row %s: the self-test ran no %s in %s", ch.ID, ch.Fault, scenario) {
			continue
		}
		assert.Equal(t, scenario, rep.ID, ch.Fault)
		row, ok := lastChainRow(rep.Chains, ch.ID)
		if !assert.True(t, ok, "row %s did not run in the %s run of hostile-chains", ch.ID, ch.Fault) {
			continue
		}
		found := slices.Contains(row.Found, ch.Expect)
		if ch.OtherDefence == "" {
			if !found && row.Stopped && toolSandbox() != sandbox.Bwrap {
				// Under Landlock the launch tenant's shell adds no entry to
				// its home's top level: every attacker the row may have was
				// stopped in its own shell. (Under bubblewrap a stop is a
				// broken plant, and fails below.)
				t.Logf("row %s: not judged: the shells here run in %s, and its attackers' own shells could not make the plant (%s)", ch.ID, toolSandbox(), row.Outcome)
				continue
			}
			if !found && !row.Stopped && strings.Contains(row.Outcome, "Permission denied") {
				// A system folder the tests' user cannot write (CI runs them
				// unprivileged): the machine stopped the row, not agentd.
				t.Logf("row %s: not judged: the tests' user may not write there (%s)", ch.ID, row.Outcome)
				continue
			}
			assert.True(t, found, "row %s (%s against %s) was not found by %s with %s on: found %v; it ended: %s; %s",
				ch.ID, row.Attacker, row.Victim, ch.Expect, ch.Fault, row.Found, row.Outcome, rowCanaryFindings(rep, ch.ID, row.Attacker))
			continue
		}
		if u := ch.OtherDefenceUnder; u != "" && string(toolSandbox()) != u {
			// The other defence is a sandbox's that the shells here do not
			// run in: the row lands with its fault alone.
			assert.True(t, found, "row %s (%s against %s) was not found by %s with %s on, the shells in %s, without %s's defence (%s): found %v; it ended: %s",
				ch.ID, row.Attacker, row.Victim, ch.Expect, ch.Fault, toolSandbox(), u, ch.OtherDefence, row.Found, row.Outcome)
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
		if row, ok = lastChainRow(both.Chains, ch.ID); assert.True(t, ok, "row %s did not run in the %s run of hostile-chains", ch.ID, ch.ControlFaults()) {
			assert.True(t, slices.Contains(row.Found, ch.Expect), "row %s (%s against %s) was not found by %s with %s on (%s switches off: %s): found %v; it ended: %s",
				ch.ID, row.Attacker, row.Victim, ch.Expect, ch.ControlFaults(), ch.AlsoFault, ch.OtherDefence, row.Found, row.Outcome)
		}
	}
	for _, a := range runs["hostile-chains"][attack.FaultDeleteRace].Chains {
		if a.Row == "race-delete-recreate" {
			t.Logf("%s: %s", a.Row, a.Outcome)
		}
	}
}

// toolSandbox is the tool sandbox agentd's shells run in here (auto's
// choice: bwrap, else landlock, else none).
func toolSandbox() sandbox.Mode {
	m, err := sandbox.Effective(sandbox.Auto)
	if err != nil {
		return sandbox.None
	}
	return m
}

// lastChainRow is the row id as it last ran: a run its attacker's own
// shell stopped (ChainRow.Stopped) is followed by the next attacker's.
func lastChainRow(rows []ChainRow, id string) (ChainRow, bool) {
	for i := len(rows) - 1; i >= 0; i-- {
		if rows[i].Row == id {
			return rows[i], true
		}
	}
	return ChainRow{}, false
}

// rowCanaryFindings says where rep found the write canary minted for the
// row id's run by attacker, phase by phase: a row left without its finding
// is told apart from one whose evidence came in another phase (which the
// row is not credited with: attributeChains).
func rowCanaryFindings(rep Report, id, attacker string) string {
	kind := chainRowKind(id)
	var where []string
	for _, p := range rep.Phases {
		for _, f := range p.Findings {
			if f.Owner == attacker && f.Kind == kind {
				where = append(where, fmt.Sprintf("phase %s: %s", p.Name, f))
			}
		}
	}
	if len(where) == 0 {
		return "no finding of the run holds the row's write canary"
	}
	return "the row's write canary was found in: " + strings.Join(where, "; ")
}

// faultyRuns are a self-test's faulty runs by scenario, then fault.
type faultyRuns map[string]map[string]Report

// chainScenario is the scenario that runs ch.
func chainScenario(ch attack.Chain) string {
	if restarts(ch) {
		return "hostile-restarts"
	}
	return "hostile-chains"
}

// chainsScenario reports whether f is a fault of the chains' scenarios.
func chainsScenario(f Fault) bool {
	return f.Scenario == "hostile-chains" || f.Scenario == "hostile-restarts"
}

// restartFaults are the faults of hostile-chains among faults whose rows
// (or rows they are the positive control of, with another defence off)
// wait for a restart: the same faults, run in hostile-restarts, each
// expecting its first such row's invariant.
func restartFaults(faults []Fault) []Fault {
	var out []Fault
	for _, f := range faults {
		if f.Scenario != "hostile-chains" {
			continue
		}
		for _, ch := range attack.Chains() {
			if restarts(ch) && (ch.Fault == f.Name && ch.OtherDefence == "" || ch.AlsoFault != "" && ch.ControlFaults() == f.Name) {
				out = append(out, Fault{Name: f.Name, Scenario: "hostile-restarts", Expect: ch.Expect, Why: f.Why})
				break
			}
		}
	}
	return out
}

// selfTestWithRestarts is SelfTestWith over faults (the chains' faults
// run whole), and at once over their restartFaults: the faulty runs of
// both, by scenario.
func selfTestWithRestarts(ctx context.Context, t *testing.T, cfg Config, faults []Fault) (SelfTestResult, SelfTestResult, faultyRuns) {
	t.Helper()
	var res, rst SelfTestResult
	var errRes, errRst error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rcfg := cfg
		rcfg.WorkDir = filepath.Join(cfg.WorkDir, "restarts")
		rst, errRst = SelfTestWith(ctx, Default(), rcfg, restartFaults(faults), SelfTestOptions{Whole: chainsScenario})
	}()
	res, errRes = SelfTestWith(ctx, Default(), cfg, faults, SelfTestOptions{Whole: chainsScenario})
	wg.Wait()
	require.NoError(t, errRes)
	require.NoError(t, errRst)
	runs := faultyRuns{}
	for _, r := range []SelfTestResult{res, rst} {
		for _, o := range r.Outcomes {
			if runs[o.Scenario] == nil {
				runs[o.Scenario] = map[string]Report{}
			}
			runs[o.Scenario][o.Fault] = r.Faulty[o.Fault]
		}
	}
	return res, rst, runs
}
