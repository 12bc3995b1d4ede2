package faults

// Faults of the environment of the programs agentd starts outside the
// sandbox (issue 46).
const (
	// LauncherEnv: a tenant's tool environment (its own .env included) is
	// the whole environment of the programs that start its sandboxed
	// terminal and plugin host from outside the sandbox (bwrap, the
	// Landlock launcher's two stages, a plugin host's launcher), so its
	// LD_PRELOAD runs its code there as the server's user, unconfined.
	LauncherEnv Name = "launcher-env"
)

// launcherEnvFaults lists the faults of this file.
func launcherEnvFaults() []Name { return []Name{LauncherEnv} }
