package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunWritesCacheAndDatabaseFolder(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "data", "sub", "one-api.db")
	t.Setenv("SQLITE_PATH", db)
	t.Setenv("TIKTOKEN_CACHE_DIR", "")
	if err := run([]string{"--tiktoken-dir", filepath.Join(dir, "tk")}); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "tk"))
	if err != nil || len(entries) != 4 {
		t.Errorf("tiktoken folder: %v, %d entries, want 4", err, len(entries))
	}
	if st, err := os.Stat(filepath.Dir(db)); err != nil || !st.IsDir() {
		t.Errorf("the database's folder was not made: %v", err)
	}
}

func TestRunNeedsAFolder(t *testing.T) {
	t.Setenv("TIKTOKEN_CACHE_DIR", "")
	t.Setenv("SQLITE_PATH", "")
	err := run(nil)
	if err == nil || !strings.Contains(err.Error(), "TIKTOKEN_CACHE_DIR") {
		t.Errorf("run with no folder: %v, want an error naming TIKTOKEN_CACHE_DIR", err)
	}
	if err := run([]string{"--tiktoken-dir", t.TempDir(), "--", "no-such-command-anywhere"}); err == nil || !strings.Contains(err.Error(), "no-such-command-anywhere") {
		t.Errorf("run with a missing command: %v, want an error naming it", err)
	}
}

// TestMain runs setup itself when the test binary is started as setup
// (SETUP_TEST_ARGS): run execs the command after "--", which must not
// replace the test process.
func TestMain(m *testing.M) {
	if args := os.Getenv("SETUP_TEST_ARGS"); args != "" {
		if err := run(strings.Split(args, "\x1f")); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestNodeTypes: node 1 starts its command with the NODE_TYPE it was
// given, any other node as a slave (the one NODE_TYPE it passes on); node
// 0 is refused.
func TestNodeTypes(t *testing.T) {
	for _, c := range []struct{ node, want string }{{"1", "master"}, {"2", "slave"}} {
		dir := t.TempDir()
		out := filepath.Join(dir, "node-type")
		args := []string{"--tiktoken-dir", filepath.Join(dir, "tk"), "--node", c.node, "--", "sh", "-c", `printf %s "$NODE_TYPE" > "$0"`, out}
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "SETUP_TEST_ARGS="+strings.Join(args, "\x1f"), "NODE_TYPE=master", "SQLITE_PATH=")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("setup --node %s: %v: %s", c.node, err, b)
		}
		got, err := os.ReadFile(out)
		if err != nil || string(got) != c.want {
			t.Errorf("setup --node %s: NODE_TYPE %q (%v), want %q", c.node, got, err, c.want)
		}
	}
	if err := run([]string{"--tiktoken-dir", t.TempDir(), "--node", "0"}); err == nil || !strings.Contains(err.Error(), "--node 0") {
		t.Errorf("setup --node 0: %v, want an error naming it", err)
	}
}
