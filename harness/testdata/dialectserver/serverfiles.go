package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// serverLog appends a line for every turn to logs/server.log in the launch
// home, a file of the server's own (a target file's server_files), with
// DIALECT_SERVER_LOG=1; with DIALECT_SERVER_LOG=keys the line carries the
// turn's provider key (a tenant's secret in a server-wide file).
func serverLog(s *session, key string) {
	mode := os.Getenv("DIALECT_SERVER_LOG")
	if mode == "" {
		return
	}
	line := fmt.Sprintf("turn of session %s (profile %q)\n", s.id, s.profile)
	if mode == "keys" {
		line = fmt.Sprintf("turn of session %s (profile %q) with key %s\n", s.id, s.profile, key)
	}
	dir := filepath.Join(launchHome(), "logs")
	if d := os.Getenv("DIALECT_SERVER_LOG_DIR"); d != "" {
		dir = d // a state root of the server's, outside every home
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "server log:", err)
		return
	}
	f, err := os.OpenFile(filepath.Join(dir, "server.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "server log:", err)
		return
	}
	defer f.Close()
	_, _ = f.WriteString(line)
}
