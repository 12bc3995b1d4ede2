package server

import (
	"os"
	"testing"

	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
)

// TestMain lets the test binary be its servers' sandbox launcher
// (Options.Self): where the tool sandbox is Landlock (no bubblewrap here),
// a terminal starts as `<self> sandbox-exec ...`.
func TestMain(m *testing.M) {
	sandbox.ExitIfLauncher(os.Args, os.Stderr)
	os.Exit(m.Run())
}

// testSelf is Options.Self for the servers the tests make: this binary.
func testSelf(t *testing.T) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("this test binary: %v", err)
	}
	return []string{exe}
}
