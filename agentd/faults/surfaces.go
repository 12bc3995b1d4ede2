package faults

// Faults of the plugin surfaces beyond tools (issue 14), each caught by
// the plugin-surfaces scenario.
const (
	// GlobalHooks: plugin hooks are keyed process-wide: every profile's
	// hook events (tool and model calls, session start and end) run in the
	// plugins of the first profile whose plugins loaded.
	GlobalHooks Name = "global-hooks"
	// GlobalMemory: plugin memory providers are keyed process-wide: every
	// profile's sessions are initialised, prefetched, synced and shut down
	// in the memory provider of the first profile that had one.
	GlobalMemory Name = "global-memory"
	// GlobalPluginState: the plugins' state facade (plugin.State) is one
	// process-wide map keyed by the key alone, not by the session: a key
	// every tenant's plugin uses holds whichever tenant wrote it last, and
	// the others read that tenant's value (caught by colliding-inputs,
	// issue 21).
	GlobalPluginState Name = "global-plugin-state"
)

// surfaceFaults lists the faults of this file.
func surfaceFaults() []Name { return []Name{GlobalHooks, GlobalMemory, GlobalPluginState} }
