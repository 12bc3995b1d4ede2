package certificate

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/scenarios"
)

var authzFinding = invariants.Finding{Invariant: invariants.Authz, Tenant: "alpha", Owner: "beta",
	Where:  invariants.Where{Label: `route "own logs"`, Method: "GET", Path: "/api/log/self"},
	Detail: "alpha's credentials with beta's ids were not refused: HTTP 200"}

// gatewayLeak is a scenario whose one finding is authzFinding, logged the
// way a run logs it.
func gatewayLeak() scenarios.Report {
	r := passing("gateway-routes")
	r.Result = scenarios.Leak
	r.Phases[1].Findings = []invariants.Finding{authzFinding}
	r.Phases[1].Counts.Findings = 1
	r.Log = []string{"gateway-routes/cron: " + authzFinding.String()}
	return r
}

func writeKnown(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "known.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	return path
}

const knownLogs = `- invariant: authz
  place: 'route "own logs" .*GET /api/log/self'
  reason: the log API lists every user's rows (upstream issue 123)
  expires: 2030-01-31
`

func TestKnownFindingsRefuseBadFiles(t *testing.T) {
	t.Parallel()
	for name, text := range map[string]string{
		"no reason":     "- {invariant: authz, place: x, expires: 2030-01-01}\n",
		"bad regexp":    "- {invariant: authz, place: '(', reason: r, expires: 2030-01-01}\n",
		"bad date":      "- {invariant: authz, place: x, reason: r, expires: soon}\n",
		"unknown field": "- {invariant: authz, place: x, reason: r, expires: 2030-01-01, owner: me}\n",
		"no place":      "- {invariant: authz, reason: r, expires: 2030-01-01}\n",
	} {
		_, err := LoadKnownFindings(writeKnown(t, text))
		assert.ErrorIs(t, err, ErrKnownFindings, name)
	}
	ks, err := LoadKnownFindings(writeKnown(t, knownLogs))
	require.NoError(t, err)
	require.Len(t, ks, 1)
	assert.True(t, ks[0].Matches(authzFinding))
	assert.False(t, ks[0].Matches(leakFinding))
	assert.False(t, ks[0].Expired(time.Date(2030, 1, 31, 23, 59, 0, 0, time.UTC)), "the expiry day still holds")
	assert.True(t, ks[0].Expired(time.Date(2030, 2, 1, 0, 0, 0, 0, time.UTC)))
}

// TestAcceptedFindingCertifiesWithCount: every finding accepted and
// unexpired: certified (exit 0), the scenario accepted (not passed), the
// finding listed in every format.
func TestAcceptedFindingCertifiesWithCount(t *testing.T) {
	t.Parallel()
	ks, err := LoadKnownFindings(writeKnown(t, knownLogs))
	require.NoError(t, err)
	c := New(Target{Name: "testgw"}, nil, []scenarios.Report{passing("gateway-tenants"), gatewayLeak()}, time.Second)
	require.Equal(t, Leaks, c.Verdict)
	c.Accept(ks, time.Date(2029, 6, 1, 0, 0, 0, 0, time.UTC))
	assert.Equal(t, Certified, c.Verdict)
	assert.Equal(t, 0, ExitCode(c.Verdict))
	assert.Equal(t, Accepted, Effective(&c.Scenarios[1]))
	assert.Equal(t, "certified with 1 accepted finding: no tenant's data reached another tenant but what the target's known findings accept", c.Headline())
	require.Len(t, c.Accepted, 1)
	assert.Empty(t, c.Scenarios[1].Findings(), "moved out of the phase")

	var md, table, junit, js bytes.Buffer
	require.NoError(t, c.WriteMarkdown(&md))
	require.NoError(t, c.WriteTable(&table))
	require.NoError(t, c.WriteJUnit(&junit))
	require.NoError(t, c.WriteJSON(&js))
	assert.Contains(t, md.String(), "Accepted findings (known, not passed) (1)")
	assert.Contains(t, md.String(), "upstream issue 123")
	assert.Contains(t, table.String(), "accepted")
	assert.Contains(t, table.String(), "known gateway-routes/cron:")
	assert.Contains(t, junit.String(), `name="accepted_finding cron"`)
	back, err := ReadJSON(&js)
	require.NoError(t, err)
	require.Len(t, back.Accepted, 1)
	assert.Equal(t, authzFinding.String(), back.Accepted[0].Finding.String())
}

// TestExpiredAcceptanceIsAFindingAgain: past its expiry the finding
// counts: leaks, exit 1, listed as expired.
func TestExpiredAcceptanceIsAFindingAgain(t *testing.T) {
	t.Parallel()
	ks, err := LoadKnownFindings(writeKnown(t, knownLogs))
	require.NoError(t, err)
	c := New(Target{Name: "testgw"}, nil, []scenarios.Report{gatewayLeak()}, time.Second)
	c.Accept(ks, time.Date(2030, 2, 1, 0, 0, 0, 0, time.UTC))
	assert.Equal(t, Leaks, c.Verdict)
	assert.Equal(t, 1, ExitCode(c.Verdict))
	require.Len(t, c.Accepted, 1)
	assert.True(t, c.Accepted[0].Expired)
	assert.Len(t, c.Scenarios[0].Findings(), 1, "the finding stays")
	var md bytes.Buffer
	require.NoError(t, c.WriteMarkdown(&md))
	assert.Contains(t, md.String(), "Expired acceptances (findings again) (1)")
}

// TestPartlyAcceptedStillLeaks: an accepted finding beside one that is not
// leaves the verdict at leaks.
func TestPartlyAcceptedStillLeaks(t *testing.T) {
	t.Parallel()
	ks, err := LoadKnownFindings(writeKnown(t, knownLogs))
	require.NoError(t, err)
	r := gatewayLeak()
	r.Phases[1].Findings = append(r.Phases[1].Findings, leakFinding)
	r.Log = append(r.Log, "gateway-routes/cron: "+leakFinding.String())
	c := New(Target{Name: "testgw"}, nil, []scenarios.Report{r}, time.Second)
	c.Accept(ks, time.Date(2029, 6, 1, 0, 0, 0, 0, time.UTC))
	assert.Equal(t, Leaks, c.Verdict)
	assert.Equal(t, scenarios.Leak, Effective(&c.Scenarios[0]))
	assert.Equal(t, 1, c.AcceptedCount())

	// A failure the log shows beside the accepted finding keeps it failed.
	r = gatewayLeak()
	r.Log = append(r.Log, "gateway-routes/cron: concurrent chat of alpha: HTTP 500")
	c = New(Target{Name: "testgw"}, nil, []scenarios.Report{r}, time.Second)
	c.Accept(ks, time.Date(2029, 6, 1, 0, 0, 0, 0, time.UTC))
	assert.NotEqual(t, Certified, c.Verdict)
}

// TestAcceptedFindingsAloneNeverLeak: a scenario whose every leak finding
// is accepted, but which also failed for something else (a phase error),
// is failed, not leak; the run fails (exit 2), never LEAKS.
func TestAcceptedFindingsAloneNeverLeak(t *testing.T) {
	t.Parallel()
	ks, err := LoadKnownFindings(writeKnown(t, knownLogs))
	require.NoError(t, err)
	r := gatewayLeak()
	r.Phases[0].Error = "turn of alpha: provider answered 500"
	r.Log = append(r.Log, r.Phases[0].Error)
	c := New(Target{Name: "testgw"}, nil, []scenarios.Report{passing("gateway-tenants"), r}, time.Second)
	require.Equal(t, Leaks, c.Verdict, "the control: unaccepted, the finding is a leak")
	c.Accept(ks, time.Date(2029, 6, 1, 0, 0, 0, 0, time.UTC))
	assert.Equal(t, scenarios.Failed, c.Scenarios[1].Result)
	assert.Equal(t, scenarios.Failed, Effective(&c.Scenarios[1]))
	assert.Equal(t, Failed, c.Verdict)
	assert.Equal(t, 2, ExitCode(c.Verdict))
}

// TestNeverReadyIsAFailureWhateverElseWasSeen: every scenario that was not
// skipped did not run because the target's backend could not start; one
// of them still holds a leak finding (read from the dying server's log)
// and an accepted one. The verdict is failed (exit 2), and its line says
// the target never became ready and what was seen besides.
func TestNeverReadyIsAFailureWhateverElseWasSeen(t *testing.T) {
	t.Parallel()
	ks, err := LoadKnownFindings(writeKnown(t, knownLogs))
	require.NoError(t, err)
	first := gatewayLeak()
	first.Phases[0].Findings = []invariants.Finding{leakFinding}
	first.NotRun = "the serve backend could not start (in scenario gateway-routes): ready line never printed\nlast output: boom"
	second := passing("pooled-serve")
	second.Result, second.Reason = scenarios.Failed, "not run: the serve backend could not start (in scenario gateway-routes): ready line never printed"
	second.NotRun = "the serve backend could not start (in scenario gateway-routes): ready line never printed"
	second.Phases = nil
	skipped := scenarios.Report{ID: "gateway-fetch", Result: scenarios.Skipped, Reason: "needs fetch routes"}
	c := New(Target{Name: "testgw"}, nil, []scenarios.Report{first, second, skipped}, time.Second)
	c.Accept(ks, time.Date(2029, 6, 1, 0, 0, 0, 0, time.UTC))
	assert.Equal(t, Failed, c.Verdict)
	assert.Equal(t, 2, ExitCode(c.Verdict))
	assert.Equal(t, "FAILED: the target never became ready (the serve backend could not start (in scenario gateway-routes): ready line never printed); nothing is certified; also seen: 1 leak finding, 1 accepted finding", c.Headline())

	// The control: the same run where one scenario did run is judged by
	// what ran (a leak), and its line counts what did not run.
	ran := passing("stdio-separate")
	c = New(Target{Name: "testgw"}, nil, []scenarios.Report{first, second, ran}, time.Second)
	assert.Equal(t, Leaks, c.Verdict)
	assert.Equal(t, "LEAKS: a tenant's data reached another tenant; 2 of 3 scenarios not run: the serve backend could not start (in scenario gateway-routes): ready line never printed", c.Headline())
}
