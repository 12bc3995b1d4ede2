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
	raceEnabled bool
	agentdBin   string // built once by TestMain
)

// TestMain builds agentd once for the whole package (with the race
// detector when the tests have it), so the scenarios drive the real binary
// over the wire, as canary-run does.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tenantcanary-agentd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "scenarios: temp dir:", err)
		os.Exit(2)
	}
	agentdBin = filepath.Join(dir, "agentd")
	args := []string{"build", "-o", agentdBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "github.com/tenantcanary/tenantcanary/cmd/agentd")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput()
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "scenarios: build agentd: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func agentdTarget() harness.Target { return harness.AgentdTarget(agentdBin) }
