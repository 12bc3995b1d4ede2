package invariants

// Invariant names the rule a finding breaks. Every invariant is a row of
// All; Lookup finds it there.
type Invariant string

// The registered invariants, in DESIGN.md's order; All says what each
// holds. Adding an invariant is one constant here and one row in All.
const (
	Request     Invariant = "request"
	Snapshot    Invariant = "env_snapshot"
	Shortfall   Invariant = "snapshot_shortfall"
	File        Invariant = "file"
	Text        Invariant = "text"
	RPC         Invariant = "rpc"
	WriteScope  Invariant = "write_scope"
	LaunchBleed Invariant = "launch_bleed"
	Control     Invariant = "control"
	// PluginBoundary: a tenant's plugin code ran inside the pooled server's
	// process, or read another tenant's home through its sandbox.
	PluginBoundary Invariant = "plugin_boundary"
	// SessionContext: a nested call (plugin -> server) ran as another
	// session than the one whose call made it.
	SessionContext Invariant = "session_context"
	// ProcessEscape: a process that carries a tenant's canary (in its
	// environment or command line) outlived the lifecycle event that
	// should have ended it: its session's close, its profile's deletion,
	// its plugin host's death, or the server's stop.
	ProcessEscape Invariant = "process_escape"
	// Availability: one tenant's load (a flood of connections and
	// requests) took another tenant's service away: its turns failed, or
	// their p99 grew past the allowed multiple of its own baseline from
	// the same run.
	Availability Invariant = "availability"
	// Authz: a call from one tenant's connection that names another
	// tenant's session, stored session, profile or cron job was not
	// refused, or its refusal carried data; or session identifiers are
	// predictable.
	Authz Invariant = "authz"
	// OperatorSecret: a secret of the operator (the serve token, a managed
	// scope value, a secret the target file declares) reached a place a
	// tenant sees.
	OperatorSecret Invariant = "operator_secret"
	// SharedPlace: a tenant's secret sits in a place outside every
	// tenant's own home (the server's cwd, TMPDIR, a shared folder, the
	// system temp folder).
	SharedPlace Invariant = "shared_place"
	// Routing: a request one tenant made of a gateway reached another
	// tenant's provider (its upstream channel): a failover onto a foreign
	// channel, a foreign model routed to its owner's channel, a pool
	// shared across tenants. A leak even when the request carries the
	// other tenant's own key, since it spends that tenant's channel on
	// another's conversation.
	Routing Invariant = "routing"
	// SharedStore: in a target that keeps every tenant in one data folder
	// (a gateway's SQLite database), a tenant's canary sits in a row
	// another tenant owns, or a tenant's secret rests outside the places
	// declared for it (another table or column, a row nobody owns, another
	// file).
	SharedStore Invariant = "shared_store"
	// Fetch: a gateway fetched a URL a tenant gave it (an image URL, a
	// callback, a notify hook) that points at a loopback listener of the
	// harness, or handed the fetched body back to the tenant. A gateway that
	// does reaches, for any tenant, whatever its own host serves on loopback:
	// the admin ports, metadata services and other tenants' side services
	// behind it (server-side request forgery).
	Fetch Invariant = "fetch"
	// UnsandboxedEnv: a process the target started outside every sandbox
	// (in the server's namespaces, without no_new_privs) carried a
	// tenant's own variable, or a payload a tenant set in its own .env
	// (the dynamic loader's, PATH, a shell's, Python's or Node's start-up
	// variables) ran there: the tenant's code runs as the server.
	UnsandboxedEnv Invariant = "unsandboxed_env"
	// RevokedCredential: after a tenant's credential was rotated, removed
	// or its profile deleted, a connection or session opened with the old
	// one was still served (a call answered, a turn's model request or
	// tool run).
	RevokedCredential Invariant = "revoked_credential"
	// ResourceHarm: one tenant's files or requests killed or restarted the
	// server, grew its memory past the stated limit, or kept another
	// tenant's calls from being answered.
	ResourceHarm Invariant = "resource_harm"
	// TenantStore: in a shared store of the target (a Redis key, a
	// PostgreSQL row) that the target file says a tenant owns, another
	// tenant's canary rests. (A tenant's secret in a key or row nobody
	// owns is a SharedPlace finding.)
	TenantStore Invariant = "store"
	// Harness: the check itself could not be carried out completely.
	Harness Invariant = "harness"
)

// Rule is one registered invariant: its name, what it holds (one line),
// whether a finding of it is an isolation failure, and its number in
// DESIGN.md's list of invariants.
type Rule struct {
	Name Invariant
	// Doc says what the invariant holds, in one line.
	Doc string
	// Leak: a finding of it is an isolation failure; the others
	// (liveness, a failed positive control, a check that could not be
	// made) fail a run without being leaks.
	Leak bool
	// Design is the item of DESIGN.md's "The invariants" list the rule
	// belongs to (1-based), 0 for one outside that list. DESIGN.md is not
	// part of this repository: keep the two in step by hand.
	Design int
}

// All is every invariant, in DESIGN.md's order. Nothing appends to it:
// a new invariant is a new row here (and a constant above).
var All = []Rule{
	{Request, "every request on a tenant's provider carries its own key and (main requests) its own model, and no foreign canary in body or headers", true, 1},
	{Snapshot, "every tool-environment snapshot a tenant's provider received ran in the tenant's own cwd and shows no foreign canary", true, 2},
	{Shortfall, "each tenant's provider received at least the expected number of snapshots (liveness, not a leak)", false, 2},
	{File, "no file under a tenant's home (state database and WAL included) holds a foreign canary, raw, encoded or inside a container", true, 3},
	{Text, "no log the harness kept and no stream it received holds a foreign canary", true, 4},
	{RPC, "no RPC frame sent to a tenant's connection holds a foreign canary", true, 4},
	{WriteScope, "a write addressed to one profile changes no other profile's files", true, 5},
	{LaunchBleed, "a secondary profile's session never reports the launch profile's model", true, 6},
	{Control, "a positive control: each tenant's own canaries do appear where they must, so a scan never passes by seeing nothing", false, 7},
	{PluginBoundary, "a tenant's plugin never runs inside the pooled server's process, never shares a host with another tenant, never reads another tenant's home", true, 8},
	{SessionContext, "a nested plugin -> server call runs as the caller's session, never another's", true, 9},
	{ProcessEscape, "no process carrying a tenant's canary outlives its session, profile, plugin host or server", true, 10},
	{Availability, "under a neighbour's flood a tenant's turns complete and their p99 stays within 3x its own baseline", true, 11},
	{Authz, "an identifier, key or model of another tenant or connection is refused with no data and no effect; session ids are not guessable", true, 12},
	{OperatorSecret, "the serve token, the managed scope's canary and declared secrets reach no tenant", true, 13},
	{SharedPlace, "no tenant secret rests outside the tenants' homes (server cwd, TMPDIR, new system-temp entries)", true, 14},
	{Routing, "a tenant's request to a gateway reaches no other tenant's provider, failover included", true, 15},
	{SharedStore, "in a gateway's one database, a tenant's secrets rest only in declared places, in rows it owns", true, 16},
	{Fetch, "a gateway fetches no loopback URL a tenant gave it, and hands no fetched body back", true, 17},
	{UnsandboxedEnv, "no process outside every sandbox carries a tenant's variable, and no payload a tenant sets in its own .env runs there", true, 18},
	{RevokedCredential, "a credential rotated, removed or deleted serves nothing more: no call, no turn's next step, on no connection or session opened with it", true, 19},
	{ResourceHarm, "no tenant's files or requests kill or restart the server, grow its memory past the limit, or keep a neighbour's calls from being answered", true, 20},
	{TenantStore, "no key or row of a shared store (Redis, PostgreSQL) that a tenant owns holds another tenant's canary, key names and encoded or compressed values included", true, 21},
	{Harness, "the check itself could not be carried out completely (not a leak)", false, 0},
}

// Lookup returns the registered rule named name.
func Lookup(name Invariant) (Rule, bool) {
	for _, r := range All {
		if r.Name == name {
			return r, true
		}
	}
	return Rule{}, false
}

// Leak reports whether a finding of this invariant is an isolation failure,
// as opposed to a liveness, control or harness failure. An invariant no
// row of All registers counts as a leak.
func (i Invariant) Leak() bool {
	if r, ok := Lookup(i); ok {
		return r.Leak
	}
	return true
}
