package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/certify"
	"github.com/tenantcanary/tenantcanary/harness/dialecttest"
	"github.com/tenantcanary/tenantcanary/internal/proc"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
)

// dialectServer is the dialect test server, built once for the package.
func dialectServer(t *testing.T) string { return built(t, "dialectserver", dialecttest.Build) }

// testgwBin is the scenarios' test gateway, built once for the package.
func testgwBin(t *testing.T) string {
	return built(t, "testgw", func(ctx context.Context, dir string) (string, error) {
		bin := filepath.Join(dir, "testgw")
		out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../../scenarios/testdata/testgw").CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("build testgw: %w: %s", err, out)
		}
		return bin, nil
	})
}

// binDir holds the test servers this package builds, once each (see
// built); TestMain removes it.
var binDir string

// TestMain lets the test binary stand in for canary-run as the embedded
// target: the harness runs os.Executable() with certify.CommandEnv=agentd
// (certify.Command), as it runs a real canary-run; target files of the
// tests run it with "agentd" first, as `canary-run agentd` runs.
func TestMain(m *testing.M) {
	certify.Dispatch(map[string]func() int{agentdCommand: agentdMain})
	if len(os.Args) > 1 && os.Args[1] == "agentd" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	dir, err := os.MkdirTemp("", "canary-run-test-bins-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "canary-run tests: temp dir:", err)
		os.Exit(2)
	}
	binDir = dir
	// The embedded agentd, its plugin hosts and launchers (this binary,
	// race-built under -race) inherit it: no second's sleep at each exit.
	proc.QuickRaceExitForChildren()
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// builds are the package's test servers, each built on first use and
// shared by every test after it.
var builds sync.Map // name -> *builtBin

type builtBin struct {
	once sync.Once
	path string
	err  error
}

// built returns the binary name, made by build(dir) the first time any
// test asks for it.
func built(t *testing.T, name string, build func(ctx context.Context, dir string) (string, error)) string {
	t.Helper()
	v, _ := builds.LoadOrStore(name, &builtBin{})
	b := v.(*builtBin)
	b.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		dir := filepath.Join(binDir, name)
		if b.err = os.MkdirAll(dir, 0o755); b.err == nil {
			b.path, b.err = build(ctx, dir)
		}
	})
	require.NoError(t, b.err, "build %s", name)
	return b.path
}

// runCLI runs the command in-process and returns its exit code and output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb syncio.Buffer
	code = dispatch(t.Context(), args, strings.NewReader(""), &out, &errb, noEnv)
	return code, out.String(), errb.String()
}

// writeFile writes content to dir/name (mode 0o644) and returns the path;
// a failed write fails the test.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	return path
}

// testExe is the path of this test binary, which stands in for canary-run
// (see TestMain).
func testExe(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	return exe
}

// noEnv is an environment with nothing set.
func noEnv(string) (string, bool) { return "", false }

// embeddedAgentds lists live processes running this test binary as the
// embedded agentd (certify.CommandEnv=agentd, or "agentd" first) with a HOME under work (the run's work tree): after a
// run returns there must be none.
func embeddedAgentds(t *testing.T, work string) []string {
	t.Helper()
	exe := testExe(t)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("list processes: %v", err)
	}
	var out []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if len(argv) < 1 || argv[0] != exe {
			continue
		}
		environ, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		// Re-executed as agentd: by certify.Command, or by hand.
		asAgentd := strings.Contains("\x00"+string(environ)+"\x00", "\x00"+certify.CommandEnv+"="+agentdCommand+"\x00")
		if !asAgentd && (len(argv) < 2 || argv[1] != "agentd") {
			continue
		}
		if strings.Contains("\x00"+string(environ), "\x00HOME="+work+string(filepath.Separator)) {
			out = append(out, e.Name()+": "+strings.Join(argv, " "))
		}
	}
	return out
}
