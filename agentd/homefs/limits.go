package homefs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// Size limits of the files agentd reads from a home. A tenant writes its
// home freely (its terminal can), so any of these may be a sparse file of
// terabytes: a read larger than its limit is refused (ErrTooLarge) from
// the descriptor's size, before any byte is read, and a file that grows
// during the read is cut at limit+1 bytes and refused too. Every limit is
// far above what agentd or a tenant's own editing legitimately makes.
const (
	// MaxConfigSize is config.yaml's limit: a few keys.
	MaxConfigSize int64 = 1 << 20
	// MaxEnvSize is .env's limit: a few variables. It is read at every
	// call of a tenant connection (its credential) and on a connect.
	MaxEnvSize int64 = 1 << 20
	// MaxSoulSize is SOUL.md's limit: a system prompt.
	MaxSoulSize int64 = 4 << 20
	// MaxMemorySize is the limit of a file of memories/: inlined into the
	// system prompt of every turn.
	MaxMemorySize int64 = 4 << 20
	// MaxJobsSize is cron/jobs.json's limit: every job with its prompt,
	// its last error and its output file's name.
	MaxJobsSize int64 = 8 << 20
	// MaxManifestSize is a plugin's plugin.yaml's limit: three keys.
	MaxManifestSize int64 = 64 << 10
	// MaxPluginFileSize is the limit of any other file of a plugin folder
	// (its Go sources among them), read whole to fingerprint the plugin
	// (a folder's files together: pluginload.MaxFingerprintBytes).
	MaxPluginFileSize int64 = 4 << 20
	// MaxCacheSize is the limit of a file agentd caches in a home
	// (cache/...): what agentd wrote there, or a tenant's replacement.
	MaxCacheSize int64 = 4 << 20
	// MaxOtherSize is the limit of any other home file agentd reads.
	MaxOtherSize int64 = 4 << 20
	// MaxDirEntries is how many entries a folder agentd lists in a home
	// (plugins/, a plugin folder) may hold.
	MaxDirEntries = 4096
)

// ErrTooLarge marks a home file larger than its limit (see LimitOf), or a
// folder with more than MaxDirEntries entries.
var ErrTooLarge = errors.New("too large")

// TooLargeError is a refused home file: Name (relative to the home) holds
// more than Limit bytes (entries, for a folder). It matches ErrTooLarge.
type TooLargeError struct {
	Name  string
	Limit int64
	Dir   bool // Limit counts a folder's entries
}

func (e *TooLargeError) Error() string {
	if e.Dir {
		return fmt.Sprintf("home folder %s holds more than %d entries: %v (agentd lists no larger folder in a home)", e.Name, e.Limit, ErrTooLarge)
	}
	return fmt.Sprintf("home file %s is larger than %d bytes: %v (agentd reads no larger %s)", e.Name, e.Limit, ErrTooLarge, path.Base(e.Name))
}

// Is makes errors.Is(err, ErrTooLarge) true.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// LimitOf is the size limit of the home file name (slash-separated,
// relative to the home), by its kind.
func LimitOf(name string) int64 {
	name = path.Clean(name)
	switch {
	case name == "config.yaml":
		return MaxConfigSize
	case name == ".env":
		return MaxEnvSize
	case name == "SOUL.md":
		return MaxSoulSize
	case strings.HasPrefix(name, "memories/"):
		return MaxMemorySize
	case name == "cron/jobs.json":
		return MaxJobsSize
	case strings.HasPrefix(name, "plugins/") && path.Base(name) == "plugin.yaml":
		return MaxManifestSize
	case strings.HasPrefix(name, "plugins/"):
		return MaxPluginFileSize
	case strings.HasPrefix(name, "cache/"):
		return MaxCacheSize
	}
	return MaxOtherSize
}

// readLimited reads f, the home file name, whole: at most limit bytes.
// The size is judged on the descriptor first (a sparse file of terabytes
// costs one fstat), then by what the read returns (a file that grows).
func readLimited(f *os.File, name string, limit int64) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read home file %s: %w", name, err)
	}
	if st.Size() > limit {
		return nil, &TooLargeError{Name: name, Limit: limit}
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read home file %s: %w", name, err)
	}
	if int64(len(b)) > limit {
		return nil, &TooLargeError{Name: name, Limit: limit}
	}
	return b, nil
}
