// Package sandboxtest lets a package's test binary be agentd's sandbox
// launcher (`<test binary> sandbox-exec ...`), so its tests start
// sandboxed commands with no agentd binary built: the package's TestMain
// is Main, and a policy's or a server's Self is Self(t).
package sandboxtest

import (
	"os"
	"testing"

	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
)

// Main runs the launcher and exits when the binary was started as one,
// and the tests otherwise.
func Main(m *testing.M) {
	sandbox.ExitIfLauncher(os.Args, os.Stderr)
	os.Exit(m.Run())
}

// Self is the argv that runs this test binary again (sandbox.Policy.Self,
// the server's Options.Self).
func Self(t testing.TB) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("this test binary: %v", err)
	}
	return []string{exe}
}
