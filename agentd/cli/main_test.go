package cli_test

import (
	"context"
	"os"
	"testing"

	"github.com/tenantcanary/tenantcanary/agentd/cli"
	"github.com/tenantcanary/tenantcanary/internal/proc"
)

// TestMain lets the test binary serve as agentd: a child started with
// AGENTD_TEST_MAIN=1 runs cli.Main with its arguments, so the end-to-end
// tests drive a race-instrumented agentd with no build step.
func TestMain(m *testing.M) {
	if os.Getenv("AGENTD_BENCH_FLOODER") == "1" { // BenchmarkNoisyNeighbour's flooding tenant
		os.Exit(runFlooder())
	}
	// agentd runs its plugin hosts as `<self> plugin-host` with the
	// profile's environment only (no AGENTD_TEST_MAIN), so that argument
	// alone makes this binary agentd too.
	// The same for the sandbox launcher, `<self> sandbox-exec`.
	if os.Getenv("AGENTD_TEST_MAIN") == "1" || (len(os.Args) > 1 && (os.Args[1] == "plugin-host" || os.Args[1] == "sandbox-exec")) {
		os.Exit(cli.Main(context.Background(), os.Args, os.Stdin, os.Stdout, os.Stderr))
	}
	// The serve it starts, and its plugin hosts and launchers (this binary,
	// race-built under -race), inherit it: no second's sleep at each exit.
	proc.QuickRaceExitForChildren()
	code := m.Run()
	stopSharedPostgres()
	os.Exit(code)
}
