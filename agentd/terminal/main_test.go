package terminal

import (
	"os"
	"testing"

	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
)

// TestMain lets the test binary be agentd's sandbox launcher:
// `<test> sandbox-exec ...`.
func TestMain(m *testing.M) {
	sandbox.ExitIfLauncher(os.Args, os.Stderr)
	os.Exit(m.Run())
}
