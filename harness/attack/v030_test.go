package attack_test

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/invariants"
)

// TestRowsOnAgentdV030 reads the certificate of hostile-chains and
// hostile-restarts against
// agentd v0.3.0 (AGENTD_V030_CERT, set by examples/targets/agentd-v0.3.0/ci.sh;
// unset, it is skipped): the rows that a defence of today's agentd stops
// with no fault of agentd to switch it off (Chain.OtherDefence, no
// AlsoFault nor ControlTest) find their leak there, which is their
// positive control; the table of every row is logged.
func TestRowsOnAgentdV030(t *testing.T) {
	path := os.Getenv("AGENTD_V030_CERT")
	if path == "" {
		t.Skip("AGENTD_V030_CERT is unset: examples/targets/agentd-v0.3.0/ci.sh sets it")
	}
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	type row struct {
		Row      string                 `json:"row"`
		Attacker string                 `json:"attacker"`
		Victim   string                 `json:"victim"`
		Found    []invariants.Invariant `json:"found"`
		Outcome  string                 `json:"outcome"`
	}
	type report struct {
		ID     string `json:"id"`
		Chains []row  `json:"chains"`
	}
	var cert struct {
		Scenarios []report `json:"scenarios"`
	}
	require.NoError(t, json.Unmarshal(data, &cert), path)
	// The chains a restart acts on run in hostile-restarts.
	var rows []row
	for _, id := range []string{"hostile-chains", "hostile-restarts"} {
		i := slices.IndexFunc(cert.Scenarios, func(s report) bool { return s.ID == id })
		require.GreaterOrEqual(t, i, 0, "no %s report in %s", id, path)
		rows = append(rows, cert.Scenarios[i].Chains...)
	}
	for _, r := range rows {
		t.Logf("%-22s %-8s -> %-8s %v", r.Row, r.Attacker, r.Victim, r.Found)
	}
	for _, ch := range attack.Chains() {
		if ch.OtherDefence == "" || ch.AlsoFault != "" || ch.ControlTest != "" {
			continue
		}
		// The row as it last ran: one its attacker's own shell could not
		// plant is followed by the next attacker's.
		j := lastIndexFunc(rows, func(r row) bool { return r.Row == ch.ID })
		if assert.GreaterOrEqual(t, j, 0, "row %s did not run against v0.3.0", ch.ID) {
			assert.Contains(t, rows[j].Found, ch.Expect, "row %s (its positive control) was not found by %s against v0.3.0: %s", ch.ID, ch.Expect, rows[j].Outcome)
		}
	}
}

func lastIndexFunc[T any](s []T, f func(T) bool) int {
	for i := len(s) - 1; i >= 0; i-- {
		if f(s[i]) {
			return i
		}
	}
	return -1
}
