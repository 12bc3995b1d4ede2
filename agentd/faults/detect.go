package faults

// Faults of authorization, operator secrets, shared places and lifecycle
// edges (issue 12), each caught by one invariant of the harness.
const (
	// ResumeAnyProfile: session.resume with a stored id the addressed
	// profile does not hold searches every profile's state.db.
	ResumeAnyProfile Name = "resume-any-profile"
	// SequentialSessions: live session ids are a counter (s-1, s-2, ...).
	SequentialSessions Name = "sequential-sessions"
	// SessionFollowsID: a live session obeys whichever connection names
	// its id (no owner check).
	SessionFollowsID Name = "session-follows-id"
	// TokenInToolEnv: the serve token (AGENTD_SESSION_TOKEN) reaches every
	// profile's tool subprocesses.
	TokenInToolEnv Name = "token-in-tool-env"
	// TmpCopy: every tool result is also written to a file in $TMPDIR.
	TmpCopy Name = "tmp-copy"
	// CreateCopiesLaunchEnv: profiles.create copies the launch profile's
	// .env into the new home.
	CreateCopiesLaunchEnv Name = "create-copies-launch-env"
	// SaveKeyLaunchFallback: model.save_key also writes the launch
	// profile's .env when the variable is missing there.
	SaveKeyLaunchFallback Name = "save-key-launch-fallback"
	// LLMFacadeLaunchProvider: a plugin's LLM facade call uses the launch
	// profile's provider, key and model.
	LLMFacadeLaunchProvider Name = "llm-facade-launch-provider"
)

// detectFaults lists the faults of this file.
func detectFaults() []Name {
	return []Name{ResumeAnyProfile, SequentialSessions, SessionFollowsID, TokenInToolEnv, TmpCopy,
		CreateCopiesLaunchEnv, SaveKeyLaunchFallback, LLMFacadeLaunchProvider}
}
