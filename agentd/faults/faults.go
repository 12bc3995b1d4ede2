package faults

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Name names one seeded fault.
type Name string

// The faults. Each comment says what the bug does.
const (
	// DotenvIntoProcess: loading a profile's .env writes its variables into
	// the process environment, and tool subprocesses inherit the process
	// environment, so later tools of other profiles see them.
	DotenvIntoProcess Name = "dotenv-into-process"
	// LaunchEnvBleed: the launch profile's .env reaches every profile's
	// tool subprocesses.
	LaunchEnvBleed Name = "launch-env-bleed"
	// SharedShell: one persistent shell serves the sessions of every profile.
	SharedShell Name = "shared-shell"
	// GlobalCwd: config.set cwd changes the process working directory, and
	// shells start there.
	GlobalCwd Name = "global-cwd"
	// CronLaunchScope: cron jobs run in the launch profile's scope.
	CronLaunchScope Name = "cron-launch-scope"
	// SharedCredential: the provider key comes from a process-wide cache
	// keyed by the variable's name.
	SharedCredential Name = "shared-credential"
	// ModelBleed: session.create for a named profile reports and uses the
	// launch profile's model.
	ModelBleed Name = "model-bleed"
	// WrongWriteScope: config.set addressed by profile writes the launch
	// profile's config.
	WrongWriteScope Name = "wrong-write-scope"
	// BroadcastEvents: turn events go to every connection.
	BroadcastEvents Name = "broadcast-events"
	// SharedStateDB: every profile's sessions go into the launch profile's
	// state.db.
	SharedStateDB Name = "shared-state-db"
	// LogSecretEncoded: the server's own log carries the provider key,
	// base64-encoded.
	LogSecretEncoded Name = "log-secret-encoded"
	// ContextLost: a nested plugin call runs as the session whose call
	// started the profile's plugins, whoever makes it.
	ContextLost Name = "context-lost"
	// PluginInProcess: plugins.isolation: host is ignored; plugins load
	// in the server's process.
	PluginInProcess Name = "plugin-in-process"
	// NoToolSandbox: a profile's terminal runs with no sandbox, whatever
	// terminal.sandbox says.
	NoToolSandbox Name = "no-tool-sandbox"
	// EscapedProcess: terminal containment is off: what a command starts
	// with setsid (or a double fork) survives session close and server stop.
	EscapedProcess Name = "escaped-process"
	// HostSharedPIDNS: the plugin host's default launcher gives no PID
	// namespace and the host's /proc, so a plugin sees other processes.
	HostSharedPIDNS Name = "host-shared-pidns"
	// NoConnLimit: no per-connection or per-profile limit on requests and
	// turns in flight and no fair scheduling: one flooding tenant takes
	// every worker and its neighbours' turns wait behind it.
	NoConnLimit Name = "no-conn-limit"
)

// All lists every fault, sorted.
func All() []Name {
	all := []Name{DotenvIntoProcess, LaunchEnvBleed, SharedShell, GlobalCwd, CronLaunchScope, SharedCredential,
		ModelBleed, WrongWriteScope, BroadcastEvents, SharedStateDB, LogSecretEncoded, ContextLost, PluginInProcess,
		NoToolSandbox, EscapedProcess, HostSharedPIDNS, NoConnLimit}
	all = append(all, detectFaults()...)
	all = append(all, gatewayFaults()...)
	all = append(all, surfaceFaults()...)
	all = append(all, multistepFaults()...)
	all = append(all, surface46Faults()...)
	all = append(all, launcherEnvFaults()...)
	all = append(all, homeFilesFaults()...)
	all = append(all, replayFaults()...)
	all = append(all, shareFaults()...)
	all = append(all, clusterFaults()...)
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	return all
}

// Sandbox is the tool sandbox whose defence fault n takes away ("bwrap":
// its PID namespace), "" when it is none's: where agentd's plugin hosts
// run under another sandbox (Landlock's launcher keeps no PID namespace
// and no /proc, and ends the host's whole tree itself), n changes nothing.
func Sandbox(n Name) string {
	if n == HostSharedPIDNS {
		return "bwrap"
	}
	return ""
}

var (
	// ErrNotAllowed: AGENTD_FAULTS is set without AGENTD_ALLOW_FAULTS=1.
	ErrNotAllowed = errors.New("AGENTD_FAULTS is set but AGENTD_ALLOW_FAULTS=1 is not: seeded faults are refused")
	// ErrUnknown: a fault name agentd does not know.
	ErrUnknown = errors.New("unknown fault")
)

// Set is the enabled faults. The zero Set has none.
type Set map[Name]bool

// Has reports whether fault n is on.
func (s Set) Has(n Name) bool { return s[n] }

// Names lists the enabled faults, sorted.
func (s Set) Names() []string {
	out := make([]string, 0, len(s))
	for n := range s {
		out = append(out, string(n))
	}
	sort.Strings(out)
	return out
}

// Parse reads a comma-separated list of fault names.
func Parse(list string) (Set, error) {
	known := map[Name]bool{}
	for _, n := range All() {
		known[n] = true
	}
	s := Set{}
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !known[Name(f)] {
			return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknown, f, strings.Join(names(All()), ", "))
		}
		s[Name(f)] = true
	}
	return s, nil
}

// FromEnv reads AGENTD_FAULTS, refused unless AGENTD_ALLOW_FAULTS=1.
func FromEnv(getenv func(string) string) (Set, error) {
	list := strings.TrimSpace(getenv("AGENTD_FAULTS"))
	if list == "" {
		return Set{}, nil
	}
	if getenv("AGENTD_ALLOW_FAULTS") != "1" {
		return nil, ErrNotAllowed
	}
	return Parse(list)
}

func names(ns []Name) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = string(n)
	}
	return out
}
