package isolation

import (
	"fmt"
	"sort"
)

// Effect is what the host boundary does to one use of the plugin.Context
// surface.
type Effect string

// The effects, from harmless to blocking.
const (
	// Remote: a facade the host reaches by call; every call returns plain
	// data. The plugin runs the same.
	Remote Effect = "remote"
	// Object: a provider object; the server holds a proxy that satisfies the
	// interface it checks and whose methods run in the host.
	Object Effect = "object"
	// Skipped: registered in-process only; in a host the call is skipped
	// with a warning and the plugin still loads.
	Skipped Effect = "skipped"
	// Degraded: a hook whose payload carries live handles; in a host those
	// fields arrive as placeholders, so a plugin using them needs
	// in-process.
	Degraded Effect = "degraded"
	// Unsupported: no process boundary can carry it; in a host the plugin
	// fails to load with the reason, and its siblings still load.
	Unsupported Effect = "unsupported"
)

// UnsupportedMethods are Context methods that hand a plugin (or take from it)
// live objects no process boundary can carry.
var UnsupportedMethods = map[string]string{
	"RegisterPlatform":        "platform adapters run on the server's event loop with native SDK clients",
	"RegisterPlatformHandler": "the handler factory receives the platform's native SDK client",
}

// SkippedMethods are Context methods skipped, with a warning, in a host.
var SkippedMethods = map[string]string{
	"RegisterCLICommand": "`agentd <command>` subcommands are wired into the local CLI, which a plugin host does not have",
}

// RemoteFacades are Context facades the host reaches by call.
var RemoteFacades = map[string]string{
	"State": "session state calls cross to the server and return plain data",
	"LLM":   "model calls cross to the server and return plain data",
}

// ObjectMethods are object-taking Context methods and the interface the
// server checks for each.
var ObjectMethods = map[string]string{
	"RegisterMemoryProvider":   "plugin.MemoryProvider",
	"RegisterImageGenProvider": "plugin.ImageGenProvider",
	"RegisterModelProvider":    "plugin.ModelProvider",
}

// DegradedHooks are hook events whose payload carries live handles.
var DegradedHooks = map[string]string{
	"pre_gateway_dispatch": "receives the live gateway runner and session store, which arrive as placeholders in a plugin host",
}

// HostPlaceholder replaces a live handle in a degraded hook's payload.
const HostPlaceholder = "<live handle: not available in the plugin host>"

// Finding is one use of the Context surface that the host boundary affects.
type Finding struct {
	// Surface is the Context method, or "RegisterHook:<event>".
	Surface string `json:"surface"`
	Effect  Effect `json:"effect"`
	Reason  string `json:"reason"`
}

func (f Finding) String() string { return fmt.Sprintf("%s (%s): %s", f.Surface, f.Effect, f.Reason) }

// CheckMethod says what the host boundary does to a call of the Context
// method; ok is false when the method crosses unchanged.
func CheckMethod(method string) (f Finding, ok bool) {
	if r, ok := UnsupportedMethods[method]; ok {
		return Finding{method, Unsupported, r}, true
	}
	if r, ok := SkippedMethods[method]; ok {
		return Finding{method, Skipped, r}, true
	}
	if r, ok := RemoteFacades[method]; ok {
		return Finding{method, Remote, r}, true
	}
	if iface, ok := ObjectMethods[method]; ok {
		return Finding{method, Object, "the server holds a proxy satisfying " + iface + " whose methods run in the host"}, true
	}
	return Finding{}, false
}

// CheckHook says what the host boundary does to a hook registered for event.
func CheckHook(event string) (f Finding, ok bool) {
	if r, ok := DegradedHooks[event]; ok {
		return Finding{"RegisterHook:" + event, Degraded, r}, true
	}
	return Finding{}, false
}

// Verdict is where a plugin can run.
type Verdict string

// The verdicts.
const (
	// VerdictPortable: nothing the plugin uses is affected by the boundary.
	VerdictPortable Verdict = "portable"
	// VerdictHost: the plugin loads in a host, some surfaces proxied or
	// skipped (the reasons say which): pool-safe.
	VerdictHost Verdict = "host"
	// VerdictInProcess: the plugin needs in-process (the reasons say why).
	VerdictInProcess Verdict = "in_process"
)

// Judge gives the verdict on a set of findings and the reasons behind it:
// the blocking findings for in_process, else every finding. The runtime and
// the audit both judge with it.
func Judge(findings []Finding) (Verdict, []string) {
	fs := Normalize(findings)
	var blocking, notes []string
	for _, f := range fs {
		if f.Effect == Unsupported || f.Effect == Degraded {
			blocking = append(blocking, f.String())
		} else {
			notes = append(notes, f.String())
		}
	}
	switch {
	case len(blocking) > 0:
		return VerdictInProcess, blocking
	case len(notes) > 0:
		return VerdictHost, notes
	}
	return VerdictPortable, nil
}

// Normalize sorts findings by surface and drops duplicates.
func Normalize(findings []Finding) []Finding {
	seen := map[string]bool{}
	var out []Finding
	for _, f := range findings {
		if !seen[f.Surface] {
			seen[f.Surface] = true
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Surface < out[j].Surface })
	return out
}
