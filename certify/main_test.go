package certify_test

import (
	"context"
	"os"
	"testing"

	"github.com/tenantcanary/tenantcanary/agentd/cli"
	"github.com/tenantcanary/tenantcanary/certify"
	"github.com/tenantcanary/tenantcanary/harness"
)

// TestMain lets this test binary be the embedded agentd it certifies:
// certify.Command("agentd", ...) re-executes it as agentd, as a user's
// test binary re-executes itself as their server.
func TestMain(m *testing.M) {
	os.Exit(certify.Main(m, map[string]func() int{"agentd": agentdMain}))
}

// agentdMain is agentd's main, run from this binary's re-execution.
func agentdMain() int {
	return cli.Main(context.Background(), append([]string{"agentd"}, os.Args[1:]...), os.Stdin, os.Stdout, os.Stderr)
}

// agentdTarget is the embedded agentd: this test binary re-executed.
func agentdTarget() harness.Target {
	argv := certify.Command("agentd")
	return harness.AgentdTarget(argv[0], argv[1:]...)
}

// noEnv is an environment with nothing set: a test appends to no real
// $GITHUB_STEP_SUMMARY.
func noEnv(string) (string, bool) { return "", false }
