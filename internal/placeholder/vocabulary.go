package placeholder

// The vocabularies: every {name} a template may use, by the kind of
// template. A new placeholder is a new Var here, with what it means.

// TargetFile is the one placeholder of every string of a target file,
// filled when the file is loaded, before anything else reads it.
var TargetFile = Vocabulary{Of: "any string of a target file", Vars: []Var{
	{"target_dir", "the folder the target file is in: paths written relative to the file"},
}}

// Argv is the vocabulary of a command line of a target file: serve,
// gateway, profile_root, preflight and llm_gateway.provision (stdio and
// cron_tick take Stdio's, which holds it). A store the target file names (stores[].name)
// is its {<name>_url}.
var Argv = Vocabulary{Of: "a command line", Vars: []Var{
	{"host", "the address the server listens on (127.0.0.1)"},
	{"port", "the port it listens on (0: any free port, printed on its ready line; one the harness picks when the ready line names none)"},
	{"cron_interval", "how often the serve backend's cron ticker runs (a Go duration)"},
	{"root", "the sandbox's root folder"},
	{"redis_url", "the URL of the target's Redis store (stores:), redis://HOST:PORT/0"},
	{"postgres_url", "the URL of the target's PostgreSQL store (stores:), postgres://USER@HOST:PORT/DB"},
	{"replica", "the serve process's (or, for a target whose replicas are its gateway's nodes, the gateway node's) number among the target's replicas, 1 to replicas (1 in every other command)"},
}, Suffix: "_url"}

// Stdio is the vocabulary of the commands that run the target's agent
// CLI on the tenants' homes, stdio and cron_tick: Argv's, and what the
// process needs where no environment is forwarded (a running server's
// host, reached over ssh or kubectl exec).
var Stdio = Argv.extend("stdio and cron_tick",
	Var{"home", "the HOME the harness gives the process: the folder holding the launch home, as the server's host sees it (remote.home for a running server)"},
	Var{"env", "every variable the harness sets for the process beside the host's own (HOME, the layout's home variable, the run's marker, env:), as NAME=VALUE words: one argument each when the argument is exactly {env}, shell-quoted inside a longer one (`env {env} agentd tui`)"},
)

// Root is the vocabulary of a path or value of a target file that lives
// in the sandbox: managed_dir, managed_config, shared_config.path, env
// values, the gateway store's files.
var Root = Vocabulary{Of: "a sandbox path", Vars: []Var{
	{"root", "the sandbox's root folder"},
}}

// Config is the vocabulary of dialect.config, the per-tenant config a
// target's dialect writes in each home.
var Config = Vocabulary{Of: "dialect.config", Vars: []Var{
	{"provider_key", "the tenant's provider key"},
	{"key_env", "the name of the variable that holds the provider key (layout.key_env)"},
	{"base_url", "the base URL of the tenant's fake provider"},
	{"model", "the tenant's model"},
	{"workdir", "the tenant's workdir"},
	{"home", "the tenant's home"},
	{"tenant", "the tenant's name"},
	{"root", "the sandbox's root folder"},
}}

// SharedConfig is the vocabulary of a shared config's section templates
// and keys (shared_config.sections): Config's, and the tenant's profile,
// state folder, gateway key, env marker, tool environment and launch flag.
var SharedConfig = Config.extend("shared_config.sections",
	Var{"profile", "the tenant's profile name (the launch tenant's is its launch profile's)"},
	Var{"state", "the tenant's state folder"},
	Var{"api_server_key", "the tenant's gateway key"},
	Var{"env_marker", "the tenant's env marker canary"},
	Var{"env", "the tenant's tool environment, a mapping (the variables agentd reads from .env)"},
	Var{"launch", "whether the tenant is the launch tenant, a boolean"},
)

// Install is the vocabulary of a probe plugin's install (its config and
// path): Config's, and the harness's bubblewrap launcher for the tenant's
// plugin host, the plugin's source folder and its destination.
var Install = Config.extend("a probe plugin's install",
	Var{"bwrap_launcher", "the harness's bubblewrap launcher of the tenant's plugin host"},
	Var{"source", "the probe plugin's source folder"},
	Var{"dest", "where the plugin is installed in the tenant's home"},
)

// Connect is the vocabulary of a transport's connect params.
var Connect = Vocabulary{Of: "a transport's connect params", Vars: []Var{
	{"token", "the token the connection authenticates with"},
}}

// Chat is the vocabulary of a chat transport's model, user and headers.
var Chat = Vocabulary{Of: "a chat transport", Vars: []Var{
	{"agent", "the agent (profile) the turn addresses"},
	{"session_id", "the harness's session id of the turn"},
}}

// Method is the vocabulary of a dialect method's params: the logical
// operation's own params by name (DESIGN.md's protocol: {session_id},
// {text}, {profile}, {key}, {value}, ...), and two of the harness's.
var Method = Vocabulary{Of: "a dialect method's params (beside the operation's own params by name)", Vars: []Var{
	{"unique", "a value of this call's own, never sent before (an idempotency key)"},
	{"agent", "the profile the call names, or the dialect's launch_agent (main) when it names none"},
}}

// Route is the vocabulary of an llm_gateway route's path and body: an
// identifier of the tenant's own ({session_id}, {file_id}, ...), which the
// gateway family fills with the caller's or another tenant's.
var Route = Vocabulary{Of: "an llm_gateway route", Suffix: "_id"}

// Chain is the vocabulary of a multi-step attack's steps, say line and
// restores (harness/attack chains): the scenario fills it for one
// attacker and one victim, plus what a step's Save kept.
var Chain = Vocabulary{Of: "an attack chain", Vars: []Var{
	{"write", "the attacker's write canary"},
	{"home", "the attacker's home"},
	{"victim", "the victim's home"},
	{"victim_name", "the victim's profile name"},
	{"own_workdir", "the attacker's workdir"},
	{"victim_workdir", "the victim's workdir"},
	{"work_root", "the folder holding every tenant's workdir"},
	{"homes_parent", "the folder holding the named profiles' homes"},
	{"victim_provider", "the victim's provider base URL"},
	{"victim_from_output", "the victim's home, relative to the attacker's job output folder"},
	{"victim_from_home", "the victim's home, relative to the attacker's home"},
	{"victim_plugin", "the name of the victim's plugin (VictimPlugin)"},
	// the layout's home files (tenants.FileNames' yaml names)
	{"config", "the home's config file"},
	{"env", "the home's .env file"},
	{"soul", "the home's SOUL.md"},
	{"memory", "the home's memory file"},
	{"jobs", "the home's cron jobs file"},
	{"job_output", "the home's cron output folder"},
	{"log", "the home's log file"},
	{"log_dir", "the home's log folder"},
	{"state", "the home's state database"},
	{"state_wal", "the state database's WAL"},
	{"plugins", "the home's plugins folder"},
	{"cache", "the home's cache folder"},
}}

// Vocabularies are every vocabulary, for the documentation.
var Vocabularies = []Vocabulary{TargetFile, Argv, Stdio, Root, Config, SharedConfig, Install, Connect, Chat, Method, Route, Chain}

// extend is v, named of, with more vars.
func (v Vocabulary) extend(of string, more ...Var) Vocabulary {
	v.Of = of
	v.Vars = append(append([]Var(nil), v.Vars...), more...)
	return v
}
