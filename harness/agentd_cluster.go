package harness

import (
	"maps"
	"slices"

	"github.com/tenantcanary/tenantcanary/harness/stores"
)

// AgentdClusterReplicas is how many serve processes the embedded agentd's
// cluster variant runs (AgentdClusterTarget).
const AgentdClusterReplicas = 3

// AgentdClusterTarget is the embedded agentd in cluster mode
// (docs/cluster.md): AgentdClusterReplicas `agentd serve` replicas on one
// set of homes, their state in a PostgreSQL and their coordination in a
// Redis the harness starts for every scenario, each replica named
// r{replica}. It is examples/targets/agentd-cluster/target.yaml built
// into the binary; argv0 and prefix are AgentdTarget's.
func AgentdClusterTarget(argv0 string, prefix ...string) Target {
	t, _ := AgentdClusterOf(AgentdTarget(argv0, prefix...))
	return t
}

// AgentdClusterOf is t, an embedded agentd target (AgentdTarget, its
// managed scope and env as the caller left them), in cluster mode with
// AgentdClusterReplicas replicas; false when t is not agentd's (its name
// is not "agentd", or its serve command is not `agentd serve`), and t is
// returned as it is.
//
// The auth cache and the response cache stay off, as in the example
// target file: agentd reads a tenant's .env at every check (so the
// credential-revocation scenario's edits are honoured at once), and
// answers every probe from the provider.
func AgentdClusterOf(t Target) (Target, bool) {
	i := slices.Index(t.Serve, "serve")
	if t.Name != "agentd" || i < 1 {
		return t, false
	}
	out := t
	out.Name = "agentd-cluster"
	out.Replicas = AgentdClusterReplicas
	out.Env = maps.Clone(t.Env)
	if out.Env == nil {
		out.Env = map[string]string{}
	}
	// URLs in the environment, not on the command line, where every
	// process listing shows them; AGENTD_ variables reach no tool.
	out.Env["AGENTD_POSTGRES_URL"] = "{postgres_url}"
	out.Env["AGENTD_REDIS_URL"] = "{redis_url}"
	out.Env["AGENTD_REPLICA"] = "r{replica}"
	out.Stores = []stores.Spec{
		{Kind: stores.Postgres, Owners: []stores.Owner{
			{Table: "agentd_sessions", Column: "profile", Value: "{profile}"},
			{Table: "agentd_messages", Column: "profile", Value: "{profile}"},
			{Table: "agentd_cron_jobs", Column: "profile", Value: "{profile}"},
			{Table: "agentd_cron_leases", Column: "profile", Value: "{profile}"},
		}},
		{Kind: stores.Redis, Owners: []stores.Owner{{Keys: "agentd:{profile}:*"}}},
	}
	// A tenant's sessions are rows in PostgreSQL, not a state.db in its
	// home: the layout names no state database (its control is skipped,
	// saying so).
	out.Layout.Files.State, out.Layout.Files.StateWAL = "", ""
	out.Layout.StateDB = ""
	return out, true
}

// WithServeArgs is t with args added to its serve command (a cluster's
// cache flags, say).
func (t Target) WithServeArgs(args ...string) Target {
	t.Serve = append(slices.Clip(t.Serve), args...)
	return t
}
