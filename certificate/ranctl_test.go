package certificate

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/scenarios"
)

// A ran-control that failed (an attack that did not run) is named on the
// console, in summary.md and in certificate.json, and the scenario never
// counts as a pass.
func TestFailedRanControlIsNamedEverywhere(t *testing.T) {
	t.Parallel()
	const detail = "attack sibling-homes of alpha did not run: its provider was never asked with the attack's nonce 0123456789 in the latest user turn"
	r := passing("hostile-tools")
	r.Result = scenarios.Failed
	r.Phases[0].Controls = append(r.Phases[0].Controls, scenarios.Control{Tenant: "alpha",
		Name: "every attack and probe proven to have run (0 of 1)", Passed: false, Detail: detail})
	r.Phases[0].Findings = []invariants.Finding{{Invariant: invariants.Control, Tenant: "alpha",
		Where: invariants.Where{Label: "attack sibling-homes"}, Detail: detail}}
	r.Log = []string{"hostile-tools/turns: " + r.Phases[0].Findings[0].String()}
	c := sample(r)
	require.Equal(t, Failed, c.Verdict)

	var table, md, js bytes.Buffer
	require.NoError(t, c.WriteTable(&table))
	require.NoError(t, c.WriteMarkdown(&md))
	require.NoError(t, c.WriteJSON(&js))
	assert.Contains(t, table.String(), detail, "console")
	assert.Contains(t, md.String(), "control failed for alpha: every attack and probe proven to have run (0 of 1)", "summary.md")
	assert.Contains(t, md.String(), detail)
	back, err := ReadJSON(&js)
	require.NoError(t, err)
	assert.False(t, back.Scenarios[0].Phases[0].Controls[1].Passed, "certificate.json")
	assert.Equal(t, detail, back.Scenarios[0].Phases[0].Controls[1].Detail)

	// Even were its result written "pass", the failed control fails it.
	r.Result = scenarios.Pass
	assert.Equal(t, scenarios.Failed, Effective(&r))
}

// The console's "why" lines leave out the findings the known-findings
// file accepts; what else failed stays.
func TestWhyLeavesOutAcceptedFindings(t *testing.T) {
	t.Parallel()
	known, err := LoadKnownFindings(writeKnown(t, knownLogs))
	require.NoError(t, err)
	r := gatewayLeak()
	r.Phases[0].Error = "turn of beta: timeout"
	r.Log = append(r.Log, "turn of beta: timeout")
	c := sample(r)
	c.Accept(known, time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC))
	why := Why(&c.Scenarios[0])
	assert.Equal(t, []string{"turn of beta: timeout"}, why)
	var table bytes.Buffer
	require.NoError(t, c.WriteTable(&table))
	for _, l := range strings.Split(table.String(), "\n") {
		if strings.HasPrefix(l, "why ") {
			assert.NotContains(t, l, "own logs", "an accepted finding in a why line: %s", l)
		}
	}
	assert.Contains(t, table.String(), "known gateway-routes/cron:", "the accepted finding is still listed")
}

// A scenario whose phase did not run (a skip part-way, or a phase after
// the one that ended it) never ends accepted, whatever the known findings
// accept.
func TestPhaseNotRunIsNeverAccepted(t *testing.T) {
	t.Parallel()
	known, err := LoadKnownFindings(writeKnown(t, knownLogs))
	require.NoError(t, err)
	r := gatewayLeak()
	r.Phases = append(r.Phases, scenarios.PhaseReport{Name: "writes", Error: "the phase did not run to its end: config.set is unsupported by the target"})
	c := sample(r)
	c.Accept(known, time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC))
	assert.NotEqual(t, Accepted, c.Scenarios[0].Result)
	assert.NotEqual(t, Certified, c.Verdict)
	var md bytes.Buffer
	require.NoError(t, c.WriteMarkdown(&md))
	assert.Contains(t, md.String(), "phase writes: `the phase did not run to its end")
}
