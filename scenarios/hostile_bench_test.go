package scenarios

import (
	"context"
	"testing"
	"time"
)

// BenchmarkNoisyNeighbourRatio is the noisy-neighbour scenario against the
// embedded agentd, b.N times: it reports the worst neighbour's p99 under
// the flood over its own baseline p99 (ratio, the aim is <= 3 times the
// machine's), the worst p99 under the flood, how much slower the machine
// control ran under the flood in the same round (machine-ratio, worst),
// and the scenario's duration (s/run). A run that is not a pass fails it.
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
	var worst, machine float64
	var worstP99, took time.Duration
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		reps, err := RunCatalog(ctx, cat, Config{Target: agentdTarget(), Tenants: 3, WorkDir: b.TempDir()})
		cancel()
		if err != nil {
			b.Fatalf("run %d: %v", i, err)
		}
		if len(reps[0].Availability) == 0 || reps[0].Result != Pass {
			b.Fatalf("run %d: %s %s\n%v", i, reps[0].Result, reps[0].Reason, reps[0].Log)
		}
		for _, r := range reps[0].Availability {
			worst = max(worst, r.Ratio)
			worstP99 = max(worstP99, r.Loaded)
			machine = max(machine, r.Machine)
		}
		took += reps[0].Duration
	}
	b.ReportMetric(worst, "ratio")
	b.ReportMetric(float64(worstP99.Milliseconds()), "p99-ms")
	b.ReportMetric(machine, "machine-ratio")
	b.ReportMetric(took.Seconds()/float64(b.N), "s/run")
}
