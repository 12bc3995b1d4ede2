package host_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/host"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

// Run them all in one go:
//
//	go test -run '^$' -bench . -benchtime 2000x ./host/

func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// BenchmarkBarePipeRoundTrip is the machine's floor: one line to another
// process and back over pipes, no protocol.
func BenchmarkBarePipeRoundTrip(b *testing.B) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{echoEnv + "=1"}
	procgroup.Prepare(cmd)
	stdin, err := cmd.StdinPipe()
	require.NoError(b, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(b, err)
	require.NoError(b, cmd.Start())
	defer func() {
		_ = stdin.Close()
		_ = procgroup.Kill(cmd.Process.Pid)
		_ = cmd.Wait()
	}()
	w, r := bufio.NewWriter(stdin), bufio.NewReader(stdout)
	msg := []byte(`{"id":1,"op":"call","session":"s","body":{"tool":"hostprobe_echo","args":null}}` + "\n")
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		_, _ = w.Write(msg)
		require.NoError(b, w.Flush())
		_, err := r.ReadSlice('\n')
		require.NoError(b, err)
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportLatency(b, lat)
}

func benchEnv(b *testing.B, tweak func(*host.Config)) *env {
	e := newEnv(b, probeHome(b), tweak)
	require.NoError(b, e.m.Start(context.Background()))
	e.seePID()
	return e
}

func benchCalls(b *testing.B, tool string) {
	e := benchEnv(b, nil)
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := e.m.Call(ctx, "s", tool, nil); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// BenchmarkToolCall is one tool call through the host.
func BenchmarkToolCall(b *testing.B) { benchCalls(b, "hostprobe_echo") }

// BenchmarkNestedRoundTrip is a tool call whose handler calls back into
// the server (DispatchTool to a native tool) before answering.
func BenchmarkNestedRoundTrip(b *testing.B) { benchCalls(b, "hostprobe_upcall") }

// BenchmarkConcurrent8 is 8 callers calling one host at once.
func BenchmarkConcurrent8(b *testing.B) {
	e := benchEnv(b, nil)
	ctx := context.Background()
	b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
	t0 := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := e.m.Call(ctx, "s", "hostprobe_echo", nil); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "calls/s")
}

// BenchmarkCrashToFirstGoodCall is the time from a host crash (the error
// its caller gets) to the first good call on a new host.
func BenchmarkCrashToFirstGoodCall(b *testing.B) {
	e := benchEnv(b, func(c *host.Config) {
		c.MaxDeaths = 1 << 30
		c.Backoff = func(int) time.Duration { return 0 }
	})
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := e.m.Call(ctx, "s", "hostprobe_crash", nil); err == nil {
			b.Fatal("the crash tool did not crash")
		}
		t0 := time.Now()
		for {
			if _, err := e.m.Call(ctx, "s", "hostprobe_echo", nil); err == nil {
				break
			}
		}
		lat = append(lat, time.Since(t0))
		e.seePID()
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1e3, "p50-ms")
}

// BenchmarkInProcessToolCall is the interpreter's own cost: the same tool
// called in this process, no boundary.
func BenchmarkInProcessToolCall(b *testing.B) {
	home := probeHome(b)
	srv := &server{}
	l, err := host.LoadInProcess(host.InProcessConfig{Profile: "p", Mode: "in_process", PluginsDir: home + "/plugins", Backend: srv, Env: []string{"PROBE_MARKER_DIR=" + home}})
	require.NoError(b, err)
	srv.loader = l
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := l.Call(ctx, "s", "hostprobe_echo", nil); err != nil {
			b.Fatal(err)
		}
	}
}
