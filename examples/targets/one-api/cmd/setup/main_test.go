package main

import (
	"os"
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
