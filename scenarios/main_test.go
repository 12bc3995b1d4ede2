package scenarios

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
)

var (
	raceEnabled  bool
	agentdBin    string // built once by TestMain
	agentdRaceIn string // the same with the race detector, when the tests have it ("" otherwise)
)

// TestMain builds agentd once for the whole package, so the scenarios
// drive the real binary over the wire, as canary-run does. With the race
// detector on, it builds agentd a second time with it: the whole catalog
// (TestCatalogAgainstAgentd) drives that one, so agentd's own races under
// every scenario's load are caught, while the tests that run scenarios
// again and again (the self-test's faulty runs, the weakened targets) use
// the plain build, which runs several times faster.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tenantcanary-agentd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "scenarios: temp dir:", err)
		os.Exit(2)
	}
	build := func(out string, race bool) error {
		args := []string{"build", "-o", out}
		if race {
			args = append(args, "-race")
		}
		args = append(args, "github.com/tenantcanary/tenantcanary/cmd/agentd")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("go %v: %w\n%s", args, err, out)
		}
		return nil
	}
	agentdBin = filepath.Join(dir, "agentd")
	err = build(agentdBin, false)
	if err == nil && raceEnabled {
		agentdRaceIn = filepath.Join(dir, "agentd-race")
		err = build(agentdRaceIn, true)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "scenarios: build agentd: %v\n", err)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func agentdTarget() harness.Target { return harness.AgentdTarget(agentdBin) }

// agentdRaceTarget is agentdTarget built with the race detector when the
// tests have it.
func agentdRaceTarget() harness.Target {
	if agentdRaceIn != "" {
		return harness.AgentdTarget(agentdRaceIn)
	}
	return agentdTarget()
}
