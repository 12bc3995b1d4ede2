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
)

// surfaceFaults lists the faults of this file.
func surfaceFaults() []Name { return []Name{GlobalHooks, GlobalMemory} }
