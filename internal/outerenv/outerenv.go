// Package outerenv is the environment of a program agentd starts outside
// every sandbox: bubblewrap itself, the Landlock launcher's two stages
// (`agentd sandbox-exec`), a plugin host's launcher (agentd's own or the
// operator's). Such a program runs as the server's user in the server's
// namespaces, before any confinement exists, so its environment is built
// from an allow-list of agentd's own variables and never holds a tenant's:
// a tenant's LD_PRELOAD or LD_LIBRARY_PATH in its own .env would otherwise
// run the tenant's code there. A tenant's variables reach only the
// sandboxed command, after confinement (see agentd/sandbox and host).
//
//	cmd.Env = outerenv.Own()
package outerenv

import (
	"os"
	"strings"
)

// allowed are the names taken from agentd's own environment, each with
// why the outside program needs it. None is a tenant's, and none names a
// credential.
var allowed = map[string]string{
	// The outside program finds what it runs (bwrap, agentd's helpers).
	"PATH": "lookup",
	// Messages and character handling of C programs (bwrap's errors).
	"LANG":     "locale",
	"LANGUAGE": "locale",
	// The time zone of the outside program's own log lines.
	"TZ": "time zone",
	// certify.CommandEnv: a program embedding agentd (canary-run, a
	// user's test binary) re-executes itself as agentd by it, so the
	// launcher and the plugin host (Policy.Self, `<self> plugin-host`)
	// are agentd at all.
	"TENANTCANARY_COMMAND": "re-execution",
	// A race-built agentd's (a test binary's) settings for its own race
	// runtime, as the operator or test set them for agentd itself.
	"GORACE": "race runtime",
}

// allowedPrefixes are name prefixes taken as allowed's names are.
var allowedPrefixes = []string{"LC_"} // the locale's categories

// Allowed reports whether name passes from agentd's own environment to a
// program it starts outside the sandbox.
func Allowed(name string) bool {
	if _, ok := allowed[name]; ok {
		return true
	}
	for _, p := range allowedPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// Of returns the entries of environ (NAME=VALUE) that are Allowed, in
// their order.
func Of(environ []string) []string {
	out := make([]string, 0, len(allowed))
	for _, kv := range environ {
		name, _, ok := strings.Cut(kv, "=")
		if ok && Allowed(name) {
			out = append(out, kv)
		}
	}
	return out
}

// Own is Of(os.Environ()): the environment of a program agentd starts
// outside the sandbox, before the variables it sets by design for it.
func Own() []string { return Of(os.Environ()) }
