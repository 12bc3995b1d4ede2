package plugins

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/tenantcanary/tenantcanary/agentd/sandbox/sandboxtest"
	"github.com/tenantcanary/tenantcanary/host"
	"github.com/tenantcanary/tenantcanary/internal/proc"
)

// TestMain lets the test binary be agentd's plugin host (`<test>
// plugin-host`, as agentd runs `<self> plugin-host`) and its sandbox
// launcher (`<test> sandbox-exec ...`).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "plugin-host" {
		if err := host.ServeChild(context.Background(), os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "plugin host:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	proc.QuickRaceExitForChildren() // the hosts and launchers (this binary, race-built under -race) exit at once
	sandboxtest.Main(m)
}
