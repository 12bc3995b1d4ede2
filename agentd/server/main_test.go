package server

import (
	"testing"

	"github.com/tenantcanary/tenantcanary/agentd/sandbox/sandboxtest"
)

// TestMain lets the test binary be its servers' sandbox launcher
// (Options.Self): where the tool sandbox is Landlock (no bubblewrap here),
// a terminal starts as `<self> sandbox-exec ...`.
func TestMain(m *testing.M) { sandboxtest.Main(m) }
