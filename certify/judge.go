package certify

import (
	"slices"
	"time"

	"github.com/tenantcanary/tenantcanary/certificate"
	"github.com/tenantcanary/tenantcanary/scenarios"
)

// judge reports one scenario's report to its sub-test: each finding the
// target's known findings do not accept as an error that reads as the
// console line (scenarios.FindingLine), then every other line of why it
// failed; a skip with its reason; accepted findings logged as such.
func (p *pipeline) judge(t T, rep scenarios.Report) {
	t.Helper()
	// The known findings applied to this report alone, as the certificate
	// applies them to the run: to a copy, since Accept rewrites phases.
	rep.Phases = slices.Clone(rep.Phases)
	one := certificate.New(certificate.Target{}, certificate.TenantsOf([]scenarios.Report{rep}), []scenarios.Report{rep}, 0)
	if p.knownErr == nil {
		one.Accept(p.known, time.Now())
	}
	r := &one.Scenarios[0]
	for _, a := range one.Accepted {
		state := "accepted until " + a.Expires
		if a.Expired {
			state = "acceptance EXPIRED on " + a.Expires
		}
		t.Logf("known %s (%s: %s)", scenarios.FindingLine(a.Scenario, a.Phase, a.Finding), state, a.Reason)
	}
	switch certificate.Effective(r) {
	case scenarios.Skipped:
		t.Skipf("%s: %s", r.ID, r.Reason)
	case scenarios.Pass, certificate.Accepted:
		t.Logf("%s: %s in %v (seed %d)", r.ID, certificate.Effective(r), r.Duration.Round(time.Millisecond), r.Seed)
		return
	}
	// The first picture: whose data reached whom in this scenario.
	if reach := certificate.ReachOf(one); reach.Counted() > 0 {
		t.Errorf("%s: who reached whom:\n%s", r.ID, reach.Text())
	}
	said := map[string]bool{}
	for _, ph := range r.Phases {
		for _, f := range ph.Findings {
			line := scenarios.FindingLine(r.ID, ph.Name, f)
			if !said[line] {
				said[line] = true
				t.Errorf("%s", line)
			}
		}
	}
	for _, l := range r.Log {
		if !said[l] {
			said[l] = true
			t.Errorf("%s", l)
		}
	}
	if len(said) == 0 {
		why := r.Reason
		if why == "" {
			why = string(certificate.Effective(r))
		}
		t.Errorf("%s: %s", r.ID, why)
	}
	t.Logf("%s: %s; seed %d (replay its orders with Options.Seed or canary-run --seed %d)", r.ID, certificate.Effective(r), r.Seed, r.Seed)
}
