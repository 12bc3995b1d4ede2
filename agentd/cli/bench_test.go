package cli_test

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"
)

// BenchmarkTurnStdio measures one turn through `agentd tui`: prompt.submit,
// a model call answering with a terminal tool call, the command in the
// session's PTY shell, a second model call answering with text, and the
// message.complete event, with every message committed to state.db. Each
// turn reads the home's files (config, .env, SOUL.md, memory) and writes
// its log and database: "homefs" opens them through the traversal-resistant
// layer (agentd's way), "plain-paths" by plain path, following links (the
// seeded home-follows-links fault: v0.3.0's way), so the two p50s are the
// layer's cost on a whole turn.
//
//	go test -run '^$' -bench TurnStdio -benchtime 300x ./agentd/cli/
func BenchmarkTurnStdio(b *testing.B) {
	for _, c := range []struct {
		name string
		env  []string
	}{
		{"homefs", nil},
		{"plain-paths", []string{"AGENTD_FAULTS=home-follows-links", "AGENTD_ALLOW_FAULTS=1"}},
	} {
		b.Run(c.name, func(b *testing.B) { benchTurnStdio(b, c.env...) })
	}
}

func benchTurnStdio(b *testing.B, env ...string) {
	w := newWorld(b)
	tn := w.addTenant("alpha", true)
	benchProvider(b, tn, 0)
	d := w.startTUI(env...)
	sid, _ := d.create("")
	d.turn(sid, "warm up") // starts the shell
	d.forget()
	b.ResetTimer()
	lat := timedTurns(b, d, sid, "turn")
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	d.close()
}

// BenchmarkServePooled: N profiles on one `agentd serve`, one websocket
// session each, all turning at once (one tool call and an answer per turn).
// One iteration is one round of N concurrent turns.
//
//	go test -run '^$' -bench ServePooled -benchtime 20x ./agentd/cli/
func BenchmarkServePooled(b *testing.B) {
	for _, n := range []int{2, 8, 32} {
		b.Run(fmt.Sprintf("profiles=%d", n), func(b *testing.B) {
			w := newWorld(b)
			tenants := make([]*tenant, n)
			for i := range tenants {
				tn := w.addTenant(fmt.Sprintf("t%02d", i), i == 0)
				benchProvider(b, tn, 0)
				tenants[i] = tn
			}
			s := w.startServe(nil)
			conns := make([]*agentd, n)
			sids := make([]string, n)
			for i, tn := range tenants {
				conns[i] = s.dial()
				sids[i], _ = conns[i].create(tn.profile)
				conns[i].turn(sids[i], "warm up")
				conns[i].forget()
			}
			lat := make([]time.Duration, 0, b.N*n)
			var mu sync.Mutex
			b.ResetTimer()
			start := time.Now()
			for it := 0; it < b.N; it++ {
				var wg sync.WaitGroup
				for i := range conns {
					wg.Add(1)
					go func() {
						defer wg.Done()
						t0 := time.Now()
						conns[i].submit(sids[i], "go")
						if got := conns[i].waitComplete(sids[i], 1); got["status"] != "complete" {
							b.Errorf("turn of %s: %v", tenants[i].name, got)
						}
						d := time.Since(t0)
						conns[i].forget()
						mu.Lock()
						lat = append(lat, d)
						mu.Unlock()
					}()
				}
				wg.Wait()
			}
			elapsed := time.Since(start)
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			pct := func(p float64) float64 {
				return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
			}
			b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "turns/s")
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
			s.stop()
		})
	}
}
