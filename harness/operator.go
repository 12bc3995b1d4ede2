package harness

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// ManagedSecretKey is the operator-only key the harness plants in the
// target's managed scope.
const ManagedSecretKey = "operator_license_key"

// plantOperatorSecrets writes an operator-only key with a fresh canary
// value into the target's managed config (appended to what is there), and
// records it in s.Operator.
func (s *Sandbox) plantOperatorSecrets() error {
	if s.Target.ManagedConfig == "" {
		return nil
	}
	path := fillRoot(s.Target.ManagedConfig, s.Root)
	if !within(path, s.Root) {
		return fmt.Errorf("managed_config %s is not inside the sandbox %s", path, s.Root)
	}
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("operator canary: %w", err)
	}
	value := "managed_secret-operator-" + hex.EncodeToString(b[:])
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("plant operator secret: %w", err)
	}
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("plant operator secret: %w", err)
	}
	if len(old) > 0 && !strings.HasSuffix(string(old), "\n") {
		old = append(old, '\n')
	}
	data := append(old, []byte(ManagedSecretKey+": "+value+"\n")...)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("plant operator secret: %w", err)
	}
	s.Operator["managed_secret"] = value
	return nil
}

// listDir names the entries of dir (nil when unreadable).
func listDir(dir string) map[string]bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := make(map[string]bool, len(entries))
	for _, e := range entries {
		out[e.Name()] = true
	}
	return out
}

// harnessTemp reports whether a system temp entry is the harness's own:
// another test's or run's sandbox, the go tool's build folder (other runs'
// tenants, none of this run's), or the scanner's own copies of a database
// it is reading (this run's, by design).
func harnessTemp(name string) bool {
	for _, p := range []string{"Test", "Benchmark", "Fuzz", "Example", "canary-run-", "canary-scan-", "go-build", "gopls"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// ownedByUs reports whether path belongs to this process's user: the
// target runs as that user, so whatever it made does (another user's
// entries are no business of this run, and may be unreadable).
func ownedByUs(path string) bool {
	st, err := os.Lstat(path)
	if err != nil {
		return false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(sys.Uid) == os.Getuid()
}

// NewSystemTemp lists the entries of the system temp folder (os.TempDir of
// the harness) made since the sandbox was: places a target that ignores
// TMPDIR writes to, scanned as shared places. The sandbox itself, when it
// lies there, is not listed.
func (s *Sandbox) NewSystemTemp() []string {
	dir := os.TempDir()
	if s.sysTmpSeen == nil {
		return nil
	}
	var out []string
	for name := range listDir(dir) {
		p := filepath.Join(dir, name)
		if s.sysTmpSeen[name] || within(s.Root, p) || within(p, s.Root) || harnessTemp(name) || !ownedByUs(p) {
			continue
		}
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}
