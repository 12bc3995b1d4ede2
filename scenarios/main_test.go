package scenarios

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/internal/proc"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

var (
	raceEnabled  bool
	agentdBin    string // built once by TestMain
	agentdRaceIn string // the same with the race detector, when the tests have it ("" otherwise)
	binDir       string // where TestMain builds, removed at the end
)

// plainAgentdEnv hands a plain test binary that inPlainBinary started the
// agentd its parent built, so it builds none of its own.
const plainAgentdEnv = "TENANTCANARY_SCENARIOS_AGENTD"

// TestMain builds agentd once for the whole package, so the scenarios
// drive the real binary over the wire, as canary-run does. With the race
// detector on, it builds agentd a second time with it: the whole catalog
// (TestCatalogAgainstAgentd) drives that one, so agentd's own races under
// every scenario's load are caught, while the tests that run scenarios
// again and again (the self-test's faulty runs, the weakened targets) use
// the plain build, which runs several times faster.
func TestMain(m *testing.M) {
	if bin := os.Getenv(plainAgentdEnv); bin != "" {
		agentdBin = bin
		os.Exit(m.Run())
	}
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
		return goCmd(append(args, "github.com/tenantcanary/tenantcanary/cmd/agentd")...)
	}
	binDir = dir
	// The agentd builds and their plugin hosts and launchers inherit it.
	proc.QuickRaceExitForChildren()
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

// plain is this package's test binary built without the race detector,
// made on first use by plainBinary.
var plain struct {
	once sync.Once
	path string
	err  error
}

// goCmd runs the go command with args, within the 10 minutes a build of
// this module may take; its output is in the error.
func goCmd(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("go %v: %w\n%s", args, err, out)
	}
	return nil
}

func plainBinary(t *testing.T) string {
	t.Helper()
	plain.once.Do(func() {
		plain.path = filepath.Join(binDir, "scenarios-plain.test")
		plain.err = goCmd("test", "-c", "-o", plain.path, "github.com/tenantcanary/tenantcanary/scenarios")
	})
	require.NoError(t, plain.err, "build the plain test binary")
	return plain.path
}

// inPlainBinary runs the calling test in this package's test binary built
// without the race detector, when this one has it, and reports whether it
// did: the caller then returns. It is for a test that runs the harness
// code the catalog tests already run under the race detector, again and
// again: the whole self-test took 342 CPU-seconds under it, 206 plain. The self-test's own machinery
// (faulty runs side by side, shared clean runs) stays under the race
// detector in cmd/canary-run's TestSelfTestCommand. The tests of a weakened
// target (the attacks' positive controls) use it too: they drive the same
// code with a fault on, and noisy-neighbour's times whatever slows the
// harness down.
func inPlainBinary(t *testing.T) bool {
	t.Helper()
	if !raceEnabled {
		return false
	}
	bin := plainBinary(t)
	args := []string{"-test.run", "^" + regexp.QuoteMeta(t.Name()) + "$", "-test.count", "1", "-test.v"}
	if d, ok := t.Deadline(); ok {
		// The child times out first, so its own report (every goroutine's
		// stack) reaches this log; a timeout of 0 would mean none at all.
		left := max(time.Until(d)-30*time.Second, time.Second)
		args = append(args, "-test.timeout", left.Round(time.Second).String())
	}
	cmd := procgroup.CommandContext(t.Context(), bin, args...)
	cmd.Env = append(os.Environ(), plainAgentdEnv+"="+agentdBin)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("%s, run by a test binary built without the race detector:\n%s", t.Name(), out)
	require.NoError(t, err, "the plain test binary's run of %s failed (its output is above)", t.Name())
	// A run that matched no test exits 0 too: it must have passed this one.
	require.Contains(t, string(out), "--- PASS: "+t.Name()+" ", "the plain test binary did not run %s", t.Name())
	return true
}
