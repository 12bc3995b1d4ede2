package scenarios

import (
	"context"
	"testing"
	"time"
)

// BenchmarkNoisyNeighbourRatio is the noisy-neighbour scenario against the
// embedded agentd, b.N times: it reports the worst neighbour's p99 under
// the flood over its own baseline p99 (ratio, the aim is <= 3) and the
// worst p99 under the flood.
// `go test -run '^$' -bench NoisyNeighbourRatio -benchtime 3x ./scenarios`
func BenchmarkNoisyNeighbourRatio(b *testing.B) {
	spec, err := Default().Get("noisy-neighbour")
	if err != nil {
		b.Fatal(err)
	}
	cat, err := NewCatalog(spec)
	if err != nil {
		b.Fatal(err)
	}
	var worst float64
	var worstP99 time.Duration
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		reps, err := RunCatalog(ctx, cat, Config{Target: agentdTarget(), Tenants: 3, WorkDir: b.TempDir()})
		cancel()
		if err != nil {
			b.Fatalf("run %d: %v", i, err)
		}
		if len(reps[0].Availability) == 0 {
			b.Fatalf("run %d measured nothing: %s %s\n%v", i, reps[0].Result, reps[0].Reason, reps[0].Log)
		}
		for _, r := range reps[0].Availability {
			worst = max(worst, r.Ratio)
			worstP99 = max(worstP99, r.Loaded)
		}
	}
	b.ReportMetric(worst, "ratio")
	b.ReportMetric(float64(worstP99.Milliseconds()), "p99-ms")
}
