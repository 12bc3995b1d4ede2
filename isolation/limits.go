package isolation

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// HostLimits bound one plugin host: the deadline of a call into it and the
// resource limits (rlimits) its process and everything it starts run under.
// Zero means "no limit" for the rlimits; Resolve fills the defaults.
type HostLimits struct {
	// CallTimeout is plugins.host.call_timeout: a call with no earlier
	// deadline that runs past it kills (and restarts) the host.
	CallTimeout time.Duration `json:"call_timeout"`
	// Memory is plugins.host.memory_limit in bytes: the host's data
	// segment (RLIMIT_DATA: its heap and anonymous mappings).
	Memory int64 `json:"memory"`
	// CPU is plugins.host.cpu_limit: CPU time over the host's life
	// (RLIMIT_CPU, in whole seconds).
	CPU time.Duration `json:"cpu"`
	// FileSize is plugins.host.file_size_limit in bytes (RLIMIT_FSIZE).
	FileSize int64 `json:"file_size"`
	// OpenFiles is plugins.host.open_files_limit (RLIMIT_NOFILE).
	OpenFiles int64 `json:"open_files"`
	// Processes is plugins.host.processes_limit (RLIMIT_NPROC). It counts
	// every process of the host's user, the server's own included, so it
	// is off unless configured.
	Processes int64 `json:"processes"`
}

// The defaults of HostLimits.
const (
	DefaultCallTimeout = 30 * time.Second
	DefaultMemoryLimit = 2 << 30 // 2 GiB
	DefaultCPULimit    = 30 * time.Minute
	DefaultFileSize    = 1 << 30 // 1 GiB
	DefaultOpenFiles   = 1024
)

// DefaultHostLimits are the limits of a host whose configuration sets none.
func DefaultHostLimits() HostLimits {
	return HostLimits{
		CallTimeout: DefaultCallTimeout, Memory: DefaultMemoryLimit, CPU: DefaultCPULimit,
		FileSize: DefaultFileSize, OpenFiles: DefaultOpenFiles,
	}
}

// hostKeys are the plugins.host keys that set a limit, each with its
// parser; "off" (or 0) means no limit, except for call_timeout.
var hostKeys = []struct {
	key string
	set func(l *HostLimits, v any) error
}{
	{"call_timeout", func(l *HostLimits, v any) error {
		d, err := parseDuration(v)
		if err == nil && d <= 0 {
			err = fmt.Errorf("%v is not a positive duration", v)
		}
		l.CallTimeout = d
		return err
	}},
	{"memory_limit", func(l *HostLimits, v any) (err error) { l.Memory, err = parseSize(v); return }},
	{"cpu_limit", func(l *HostLimits, v any) (err error) { l.CPU, err = parseDuration(v); return }},
	{"file_size_limit", func(l *HostLimits, v any) (err error) { l.FileSize, err = parseSize(v); return }},
	{"open_files_limit", func(l *HostLimits, v any) (err error) { l.OpenFiles, err = parseCount(v); return }},
	{"processes_limit", func(l *HostLimits, v any) (err error) { l.Processes, err = parseCount(v); return }},
}

// resolveLimits reads plugins.host.<key> for every limit: the managed
// scope's value wins over the profile's. A bad value is an error naming the
// key, the scope and what was wrong.
func resolveLimits(profile, managed map[string]any) (HostLimits, []string) {
	l := DefaultHostLimits()
	var errs []string
	for _, k := range hostKeys {
		v, from := lookup(managed, "plugins", "host", k.key), "managed config"
		if v == nil {
			v, from = lookup(profile, "plugins", "host", k.key), "profile config"
		}
		if v == nil {
			continue
		}
		if err := k.set(&l, v); err != nil {
			errs = append(errs, fmt.Sprintf("plugins.host.%s in the %s: %v", k.key, from, err))
		}
	}
	return l, errs
}

func isOff(v any) bool {
	s, ok := v.(string)
	return ok && (strings.EqualFold(strings.TrimSpace(s), "off") || strings.EqualFold(strings.TrimSpace(s), "none"))
}

// parseDuration reads a Go duration string ("30s", "1m30s"), "off", or a
// number of seconds.
func parseDuration(v any) (time.Duration, error) {
	if isOff(v) {
		return 0, nil
	}
	switch v := v.(type) {
	case int:
		return time.Duration(v) * time.Second, nonNegative(int64(v))
	case float64:
		return time.Duration(v * float64(time.Second)), nonNegative(int64(v))
	case string:
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration (want e.g. \"30s\", \"2m\" or \"off\")", v)
		}
		return d, nonNegative(int64(d))
	}
	return 0, fmt.Errorf("%v is a %T; want a duration string such as \"30s\"", v, v)
}

// parseSize reads a byte size: a number of bytes, or a number with a unit
// (K, M, G, T, with or without "i" and "B"; all powers of 1024), or "off".
func parseSize(v any) (int64, error) {
	return parseWhole(v, func(s string) (int64, bool) {
		s = strings.ToUpper(strings.TrimSpace(s))
		s = strings.TrimSuffix(strings.TrimSuffix(s, "B"), "I")
		mult := int64(1)
		if n := len(s); n > 0 {
			if i := strings.IndexByte("KMGT", s[n-1]); i >= 0 {
				mult = 1 << (10 * (i + 1))
				s = strings.TrimSpace(s[:n-1])
			}
		}
		f, err := strconv.ParseFloat(s, 64)
		return int64(f * float64(mult)), err == nil && f >= 0
	}, `size (want e.g. "512MiB", "2G", a number of bytes, or "off")`, `a size such as "2GiB"`)
}

// parseCount reads a whole number, or "off".
func parseCount(v any) (int64, error) {
	return parseWhole(v, func(s string) (int64, bool) {
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		return n, err == nil && n >= 0
	}, `count (want a whole number or "off")`, "a whole number")
}

// parseWhole reads a limit held in an int64: "off" (0), a YAML int, or a
// string parse reads (false: it is not one; the error says it is not a
// what). Any other type wants want.
func parseWhole(v any, parse func(string) (int64, bool), what, want string) (int64, error) {
	if isOff(v) {
		return 0, nil
	}
	switch v := v.(type) {
	case int:
		return int64(v), nonNegative(int64(v))
	case string:
		n, ok := parse(v)
		if !ok {
			return 0, fmt.Errorf("%q is not a %s", v, what)
		}
		return n, nil
	}
	return 0, fmt.Errorf("%v is a %T; want %s", v, v, want)
}

func nonNegative(n int64) error {
	if n < 0 {
		return fmt.Errorf("%d is negative", n)
	}
	return nil
}
