package certificate_test

import (
	"fmt"
	"os"
	"time"

	"github.com/tenantcanary/tenantcanary/certificate"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/scenarios"
	"github.com/tenantcanary/tenantcanary/tenants"
)

func Example() {
	reports := []scenarios.Report{{
		ID: "pooled-serve", Result: scenarios.Pass, Duration: 650 * time.Millisecond,
		Roster: []scenarios.TenantInfo{{Name: "default", Tag: "0a1b2c3d4e", Launch: true}, {Name: "alpha", Tag: "5f6a7b8c9d"}},
		Phases: []scenarios.PhaseReport{{Name: "interleaved-turns", Counts: scenarios.Counts{Requests: 8, Snapshots: 4}}},
	}}
	c := certificate.New(certificate.Target{Name: "agentd", Version: "agentd/0.1"},
		certificate.TenantsOf(reports), reports, 700*time.Millisecond)
	_ = c.WriteTable(os.Stdout)
	fmt.Println("exit", certificate.ExitCode(c.Verdict))
	// Output:
	// SCENARIO      RESULT  PHASES  REQUESTS  SNAPSHOTS  FINDINGS  DURATION
	// pooled-serve  pass    1       8         4          0         0.7s
	// verdict: certified: no tenant's data reached another tenant (exit 0) in 0.7s
	// exit 0
}

// The who-reached-whom matrix of a run where beta's provider key reached
// alpha's provider, and the operator's serve token alpha's log: what
// summary.md opens its findings with, and the console prints.
func ExampleReachOf() {
	at := 3
	reports := []scenarios.Report{{
		ID: "pooled-serve", Result: scenarios.Leak,
		Roster: []scenarios.TenantInfo{{Name: "alpha", Tag: "5f6a7b8c9d"}, {Name: "beta", Tag: "0a1b2c3d4e"}, {Name: "gamma", Tag: "9e8d7c6b5a"}},
		Phases: []scenarios.PhaseReport{{Name: "interleaved-turns", Findings: []invariants.Finding{
			{Invariant: invariants.Request, Tenant: "alpha", Owner: "beta", Kind: tenants.ProviderKey, Where: invariants.Where{Request: &at, Part: "auth"}},
			{Invariant: invariants.OperatorSecret, Tenant: "alpha", Owner: invariants.OperatorOwner, Kind: "serve_token", Where: invariants.Where{Label: "log of alpha"}},
		}}},
	}}
	c := certificate.New(certificate.Target{Name: "agentd"}, certificate.TenantsOf(reports), reports, time.Second)
	r := certificate.ReachOf(c)
	fmt.Print(r.Text())
	fmt.Println(r.Cell("beta", "alpha").Findings)
	// Output:
	// who reached whom (rows: whose canary; columns: where it was found):
	//             alpha  beta  gamma
	//   alpha     -      -     -
	//   beta      1      -     -
	//   gamma     -      -     -
	//   operator  1      -     -
	//   beta's data reached alpha; the operator's secrets reached alpha; no other tenant's data left its
	//   tenant
	// 1
}
