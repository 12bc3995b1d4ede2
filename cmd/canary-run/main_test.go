package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tenantcanary/tenantcanary/internal/syncio"
)

// TestMain lets the test binary stand in for canary-run as the embedded
// target: the harness runs os.Executable() with "agentd" first, as it runs
// a real canary-run.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "agentd" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// runCLI runs the command in-process and returns its exit code and output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb syncio.Buffer
	code = dispatch(t.Context(), args, strings.NewReader(""), &out, &errb, noEnv)
	return code, out.String(), errb.String()
}

// noEnv is an environment with nothing set.
func noEnv(string) (string, bool) { return "", false }

// embeddedAgentds lists live processes running this test binary as the
// embedded agentd with a HOME under work (the run's work tree): after a
// run returns there must be none.
func embeddedAgentds(t *testing.T, work string) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("find the test binary: %v", err)
	}
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
		if len(argv) < 2 || argv[0] != exe || argv[1] != "agentd" {
			continue
		}
		environ, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		if strings.Contains("\x00"+string(environ), "\x00HOME="+work+string(filepath.Separator)) {
			out = append(out, e.Name()+": "+strings.Join(argv, " "))
		}
	}
	return out
}
