package terminal

import (
	"os"
	"testing"

	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
)

// TestMain lets the test binary be agentd's sandbox launcher:
// `<test> sandbox-exec ...`.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == sandbox.LauncherCommand {
		os.Exit(sandbox.RunLauncher(os.Args[2:], os.Stderr))
	}
	os.Exit(m.Run())
}
