package scenarios

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/invariants"
)

// chainDetection is one row class of hostile-chains as the test proves it:
// the phase that runs the row, the seeded fault that re-opens it on a
// defended agentd, and the invariant that must catch it.
type chainDetection struct {
	Phase  string
	Row    string
	Fault  string
	Expect invariants.Invariant
}

// chainDetections: one row per class (two where a class has two ways to
// show), each with its fault and invariant.
var chainDetections = []chainDetection{
	{"home-links", "link-soul-to-env", attack.FaultHomeFollowsLinks, invariants.Request},
	{"home-links", "link-soul-to-proc", attack.FaultHomeFollowsLinks, invariants.OperatorSecret},
	{"settings", "cwd-victim-workdir", attack.FaultWorkdirAnywhere, invariants.Request},
	{"settings", "cwd-work-root", attack.FaultWorkdirAnywhere, invariants.WriteScope},
	{"tenant-paths", "job-id-path", attack.FaultUncheckedJobIDs, invariants.File},
	{"operator-settings", "own-sandbox-none", attack.FaultTenantOperatorSettings, invariants.Request},
	{"restart", "own-plugin-launcher", attack.FaultTenantOperatorSettings, invariants.Request},
	{"restart", "persist-state", attack.FaultHomeFollowsLinks, invariants.File},
	{"races", "race-delete-recreate", attack.FaultDeleteRace, invariants.File},
}

// checkChainDetections: in each fault's run of hostile-chains (the
// self-test's), every row class that fault re-opens finds its leak, the
// expected invariant in the phase that runs the row: the positive control
// of the multi-step family, row class by row class. The clean run is
// TestCatalogAgainstAgentd/hostile-chains.
func checkChainDetections(t *testing.T, faulty map[string]Report) {
	t.Helper()
	rows := map[string]bool{}
	for _, c := range attack.Chains() {
		rows[c.ID] = true
	}
	for _, d := range chainDetections {
		require.True(t, rows[d.Row], "row %s is in attack.Chains()", d.Row)
		rep, ok := faulty[d.Fault]
		if !assert.True(t, ok, "the self-test ran no %s", d.Fault) {
			continue
		}
		require.Equal(t, "hostile-chains", rep.ID, d.Fault)
		var seen []string
		found := false
		for _, p := range rep.Phases {
			if p.Name != d.Phase {
				continue
			}
			for _, f := range p.Findings {
				seen = append(seen, string(f.Invariant))
				found = found || f.Invariant == d.Expect
			}
		}
		assert.True(t, found, "%s (phase %s, fault %s): no %s finding; saw %s", d.Row, d.Phase, d.Fault, d.Expect, strings.Join(seen, ","))
	}
	for _, a := range faulty[attack.FaultDeleteRace].Attacks {
		if a.Row == "race-delete-recreate" {
			t.Logf("%s: %s", a.Row, strings.Join(a.Reached, "; "))
		}
	}
}
