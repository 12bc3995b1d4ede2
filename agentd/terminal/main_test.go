package terminal

import (
	"testing"

	"github.com/tenantcanary/tenantcanary/agentd/sandbox/sandboxtest"
)

// TestMain lets the test binary be agentd's sandbox launcher:
// `<test> sandbox-exec ...`.
func TestMain(m *testing.M) { sandboxtest.Main(m) }
