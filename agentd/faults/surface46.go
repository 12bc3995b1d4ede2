package faults

// Faults of issue 46: a credential revoked under a live connection, the
// plugin isolation a server that serves several profiles picks by
// default, and the one-shot cron tick's plugins. Each restores agentd
// 0.14.1's behaviour.
const (
	// StaleCredential: the calls of a tenant-bound connection that address
	// a session (prompt.submit, session.close, config.set and
	// model.save_key with session_id) and the turns it started skip the
	// credential re-check: a key rotated or removed, or a profile
	// deleted, leaves the connection's sessions served and its turns
	// running their model requests and tool calls.
	StaleCredential Name = "stale-credential"
	// LaunchModeIsolation: the default plugins.isolation follows the launch
	// mode (in_process for tui, cron and the other single-profile
	// commands), not whether the server serves more than one profile, so
	// `agentd tui` serving session.create{profile: X} runs X's plugins in
	// its own process.
	LaunchModeIsolation Name = "launch-mode-isolation"
	// CronTickInProcess: `agentd cron tick` loads every profile's plugins
	// in its own process (in_process), whatever the isolation serve uses:
	// a tenant's cron job (a plugin tool) reads the launch tenant's
	// environment.
	CronTickInProcess Name = "cron-tick-in-process"
)

// surface46Faults lists the faults of this file.
func surface46Faults() []Name { return []Name{StaleCredential, LaunchModeIsolation, CronTickInProcess} }
