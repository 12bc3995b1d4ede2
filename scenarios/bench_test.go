package scenarios

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
)

// BenchmarkCleanCatalog is the flakiness run: the whole clean catalog
// against agentd, b.N times in a row; any finding or harness failure fails
// it. `go test -run '^$' -bench CleanCatalog -benchtime 20x ./scenarios`
// reports the wall time of one catalog run (ns/op) with 3 tenants.
func BenchmarkCleanCatalog(b *testing.B) {
	benchCatalog(b, 3)
}

// BenchmarkCatalogTenants is the catalog's wall time with 2 and with 32
// tenants per scenario.
func BenchmarkCatalogTenants(b *testing.B) {
	for _, n := range []int{2, 32} {
		b.Run(fmt.Sprintf("tenants=%d", n), func(b *testing.B) { benchCatalog(b, n) })
	}
}

// BenchmarkClusterCatalog is the catalog's wall time against agentd in
// cluster mode (a PostgreSQL and a Redis started for every scenario) with
// 3 replicas and with 1 (where the replicas scenario is skipped): what a
// replicated deployment costs a certification.
func BenchmarkClusterCatalog(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			tg := harness.AgentdClusterTarget(agentdBin)
			tg.Replicas = n
			benchCatalogOf(b, tg, 3)
		})
	}
}

func benchCatalog(b *testing.B, tenants int) { benchCatalogOf(b, agentdTarget(), tenants) }

func benchCatalogOf(b *testing.B, target harness.Target, tenants int) {
	var runs, findings, failures int
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		reps, err := RunCatalog(ctx, Default(), Config{Target: target, Tenants: tenants, WorkDir: b.TempDir()})
		cancel()
		if err != nil {
			b.Fatalf("run %d: %v", i, err)
		}
		runs++
		for _, r := range reps {
			findings += len(r.Findings())
			if r.Result != Pass && r.Result != Skipped { // a scenario the target cannot run is no failure
				failures++
				b.Errorf("run %d: %s: %s %s\n%v", i, r.ID, r.Result, r.Reason, r.Log)
			}
		}
	}
	b.ReportMetric(float64(findings), "findings")
	b.ReportMetric(float64(failures), "failures")
	b.Logf("%d clean catalog runs with %d tenants: %d findings, %d scenario failures", runs, tenants, findings, failures)
}

// BenchmarkSurfaceDiscovery is the discovery pass's cost: the surface
// scenario's discover phase alone against agentd, with 3 and 8 tenants;
// s/tenant is the phase's wall time per tenant. `go test -run '^$' -bench
// SurfaceDiscovery -benchtime 3x ./scenarios`
func BenchmarkSurfaceDiscovery(b *testing.B) {
	spec := surfaceScenario()
	spec.Phases = spec.Phases[:1]
	cat, err := NewCatalog(spec)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{3, 8} {
		b.Run(fmt.Sprintf("tenants=%d", n), func(b *testing.B) {
			var phase time.Duration
			for i := 0; i < b.N; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				reps, err := RunCatalog(ctx, cat, Config{Target: agentdTarget(), Tenants: n, WorkDir: b.TempDir()})
				cancel()
				if err != nil {
					b.Fatalf("run %d: %v", i, err)
				}
				for _, r := range reps {
					if r.Result != Pass {
						b.Errorf("run %d: %s: %s %s", i, r.ID, r.Result, r.Reason)
					}
					for _, p := range r.Phases {
						phase += p.Duration
					}
				}
			}
			b.ReportMetric(phase.Seconds()/float64(b.N*n), "s/tenant")
		})
	}
}
