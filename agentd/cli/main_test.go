package cli_test

import (
	"context"
	"os"
	"testing"

	"github.com/tenantcanary/tenantcanary/agentd/cli"
	"github.com/tenantcanary/tenantcanary/host"
)

// TestMain lets the test binary serve as agentd: a child started with
// AGENTD_TEST_MAIN=1 runs cli.Main with its arguments, so the end-to-end
// tests drive a race-instrumented agentd with no build step.
func TestMain(m *testing.M) {
	// agentd runs its plugin hosts as `<self> plugin-host`; the plugin
	// engineer's command serves them in the real binary, this stands in.
	if len(os.Args) > 1 && os.Args[1] == "plugin-host" {
		if err := host.ServeChild(context.Background(), os.Stdin, os.Stdout, os.Stderr); err != nil {
			os.Stderr.WriteString("plugin host: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv("AGENTD_TEST_MAIN") == "1" {
		os.Exit(cli.Main(context.Background(), os.Args, os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
