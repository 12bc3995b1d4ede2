package faults

// Faults of the defences against a tenant that chains its own powers
// (issue 21): each switches one defence off, so the multi-step attack it
// stops finds its leak again.
const (
	// HomeFollowsLinks: agentd opens, creates and removes a home's files by
	// plain path, so a symlink a tenant planted in its own home (SOUL.md,
	// .env, config.yaml, state.db, logs, cron files) is followed out of it.
	HomeFollowsLinks Name = "home-follows-links"
	// UncheckedJobIDs: cron job ids and names read from a tenant's own
	// jobs.json are joined into paths unchecked: a run's output goes to
	// cron/output/<id>/<name>-<time>.md by plain path (agentd itself names
	// the file after the time only), so an id or a name like ../../x
	// writes the job's output outside the tenant's home.
	UncheckedJobIDs Name = "unchecked-job-ids"
	// WorkdirAnywhere: a profile's cwd is checked only for being a folder
	// and bound as a path, through any symlink: any folder (another
	// tenant's workdir or home, their parent, /proc, a system folder, a
	// symlink to a home) becomes the sandbox's read-write workdir.
	WorkdirAnywhere Name = "workdir-anywhere"
	// TenantOperatorSettings: a profile's own config.yaml may set what only
	// the operator may (plugins.isolation, plugins.host.launcher and its
	// limits, terminal.sandbox, terminal.network, terminal.workdir_roots).
	TenantOperatorSettings Name = "tenant-operator-settings"
	// DeleteRace: profiles.delete removes the home in place while the
	// profile's requests go on, and create reuses the folder, so a racing
	// request re-makes the deleted home and a re-created profile inherits
	// the deleted one's files.
	DeleteRace Name = "delete-race"
	// TenantTextAsPath: a tenant's own text is used as a path, unchecked,
	// as servers with these two features do (agentd has neither): a custom
	// prompt's @<path> references are read by plain path and inlined into
	// the system prompt, and model.save_key also keeps the key in
	// keys/<slug>.key, the slug unchecked and joined into a plain path.
	TenantTextAsPath Name = "tenant-text-as-path"
	// HostEnvTrusted: a profile's plugin host takes agentd's own variables
	// from the profile's environment, .env included, so a tenant's line
	// AGENTD_PLUGIN_HOST_KEEPER=inner turns its host's keeper off. Where
	// the host has no PID namespace of its own (no launcher, an
	// operator's launcher without one, host-shared-pidns), what its plugin
	// started then outlives the host.
	HostEnvTrusted Name = "host-env-trusted"
)

// multistepFaults lists the faults of this file.
func multistepFaults() []Name {
	return []Name{HomeFollowsLinks, UncheckedJobIDs, WorkdirAnywhere, TenantOperatorSettings, DeleteRace, TenantTextAsPath, HostEnvTrusted}
}
