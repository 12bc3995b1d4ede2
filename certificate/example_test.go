package certificate_test

import (
	"fmt"
	"os"
	"time"

	"github.com/tenantcanary/tenantcanary/certificate"
	"github.com/tenantcanary/tenantcanary/scenarios"
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
