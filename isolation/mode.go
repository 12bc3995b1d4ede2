package isolation

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// Mode is where a profile's third-party plugins run.
type Mode string

// The modes of plugins.isolation.
const (
	InProcess Mode = "in_process"
	Host      Mode = "host"
)

// Environment variables the package reads.
const (
	// HostProcessEnv is set to "1" in a plugin host's environment: inside a
	// host plugin code is already out of the server, so every loader there
	// loads directly and a host never starts a host of its own.
	HostProcessEnv = "AGENTD_PLUGIN_HOST_PROCESS"
	// ManagedDirEnv names the managed (operator) scope's folder.
	ManagedDirEnv = "AGENTD_MANAGED_DIR"
	// DefaultManagedDir is the managed scope's folder when ManagedDirEnv is
	// unset.
	DefaultManagedDir = "/etc/agentd"
)

// Settings is the plugins section of a profile's effective configuration.
type Settings struct {
	Mode Mode
	// Pinned reports that the managed scope set the mode, so the profile's
	// own value was not consulted.
	Pinned bool
	// Set reports that a scope set plugins.isolation (to a valid mode);
	// when it is false Mode is the default, which pooled serving replaces
	// (see ForPooled).
	Set bool
	// Why says where Mode came from, for the profile's log.
	Why string
	// Launcher is the argv prefix (a sandbox runner) the host runs under.
	Launcher []string
	// Limits bound the host: its call deadline and rlimits.
	Limits HostLimits
	// Warnings says what was wrong with the configuration, if anything.
	Warnings []string
	// Errors are values that cannot be used (a launcher with an open
	// quote, a limit that is not a size): Err reports them.
	Errors []string
}

// Err is an error naming every unusable value, or nil.
func (s Settings) Err() error {
	if len(s.Errors) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrBadSettings, strings.Join(s.Errors, "; "))
}

// ErrBadSettings marks a plugins setting whose value cannot be used.
var ErrBadSettings = errors.New("bad plugins settings")

// ForPooled is s as a pooled server (one process serving every profile)
// resolves it: when no scope set plugins.isolation, third-party plugins run
// in a host.
func (s Settings) ForPooled() Settings {
	if !s.Set {
		s.Mode = Host
		s.Why = "not set in the profile or managed config; a pooled server runs third-party plugins in a host by default"
	}
	return s
}

// ManagedDir is $AGENTD_MANAGED_DIR, or DefaultManagedDir.
func ManagedDir() string {
	if d := os.Getenv(ManagedDirEnv); d != "" {
		return d
	}
	return DefaultManagedDir
}

// LoadSettings reads home/config.yaml and managedDir/config.yaml (either may
// be missing) and resolves them with Resolve. It trusts the profile's own
// file as the operator's: a pooled server must not. agentd resolves with
// Resolve over the profile's config as agentd/profile.OwnConfig gives it,
// without the keys only the operator may set (profile.OperatorOnly).
func LoadSettings(home, managedDir string) (Settings, error) {
	profile, err := readYAML(filepath.Join(home, "config.yaml"))
	if err != nil {
		return Settings{}, err
	}
	var managed map[string]any
	if managedDir != "" {
		if managed, err = readYAML(filepath.Join(managedDir, "config.yaml")); err != nil {
			return Settings{}, err
		}
	}
	s := Resolve(profile, managed)
	return s, s.Err()
}

func readYAML(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("parse config %s: %w", path, err)
	}
	return m, nil
}

// Resolve gives the plugins settings of a profile config under a managed
// config. The managed plugins.isolation, plugins.host.launcher and limits
// win over the profile's. An unknown mode warns and counts as unset
// (in-process, or host under ForPooled); an unusable launcher or limit is
// in Errors (see Err).
func Resolve(profile, managed map[string]any) Settings {
	var s Settings
	raw, from := lookup(managed, "plugins", "isolation"), "managed config"
	if raw != nil {
		s.Pinned = true
	} else {
		raw, from = lookup(profile, "plugins", "isolation"), "profile config"
	}
	s.Mode = InProcess
	s.Why = "not set in the profile or managed config; the default for a single-profile server"
	if raw != nil {
		v := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(fmt.Sprint(raw))), "-", "_")
		switch Mode(v) {
		case InProcess, Host:
			s.Mode = Mode(v)
			s.Set = true
			s.Why = "set in the " + from
			if s.Pinned {
				s.Why = "pinned by the managed config"
			}
		default:
			s.Warnings = append(s.Warnings, fmt.Sprintf(
				"plugins.isolation %q in the %s is not one of %q, %q; loading plugins in-process", fmt.Sprint(raw), from, InProcess, Host))
		}
	}
	l, from := lookup(managed, "plugins", "host", "launcher"), "managed config"
	if l == nil {
		l, from = lookup(profile, "plugins", "host", "launcher"), "profile config"
	}
	launcher, err := ParseArgv(l)
	if err != nil {
		s.Errors = append(s.Errors, fmt.Sprintf("plugins.host.launcher in the %s: %v", from, err))
	}
	s.Launcher = launcher
	var errs []string
	s.Limits, errs = resolveLimits(profile, managed)
	s.Errors = append(s.Errors, errs...)
	return s
}

func lookup(m map[string]any, path ...string) any {
	var cur any = m
	for _, k := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}

// Source says who shipped the code a loader is about to run.
type Source int

// Sources of plugin code.
const (
	SourceUser    Source = iota // a plugin in a profile's home: third-party
	SourceBundled               // shipped with the server
)

// ErrRefused means user code would have run in the server process while
// plugins.isolation is host.
var ErrRefused = errors.New("refused to load third-party code in-process")

// InHostProcess reports whether this process is a plugin host.
func InHostProcess() bool { return os.Getenv(HostProcessEnv) == "1" }

// MayLoadInProcess is the one question every path that would run user code
// in the calling process asks first. It returns nil when the load may
// happen: bundled code, mode in_process, or this process is a plugin host.
// Under host it refuses with the reason, wrapping ErrRefused.
func MayLoadInProcess(what string, source Source, mode Mode) error {
	if source == SourceBundled || mode != Host || InHostProcess() {
		return nil
	}
	return fmt.Errorf("%s would run inside the server process, and plugins.isolation is %q "+
		"(third-party plugin code never runs inside the server); load it through the plugin host, "+
		"or set plugins.isolation: %s: %w", what, Host, InProcess, ErrRefused)
}
