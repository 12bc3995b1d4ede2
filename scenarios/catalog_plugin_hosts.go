package scenarios

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// PluginName is the plugin every tenant of the plugin scenario gets.
const PluginName = "canaryprobe"

// pluginProbeTool is the plugin's tool: it reports where it runs (pid,
// cwd, the whole environment), tries to read the files it is given, keeps
// a tag in the session's state (returning the one it found), and makes a
// nested call back into the server.
const pluginProbeTool = "canary_plugin_probe"

// pluginSource is the plugin's Go source, interpreted by yaegi in the
// tenant's plugin host.
const pluginSource = `package canaryprobe

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/tenantcanary/tenantcanary/plugin"
)

// hostID names this plugin host process: unique where pids are not (every
// host in a PID namespace of its own has the same small pid).
var hostID = fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())

func reads(paths []any) map[string]string {
	out := map[string]string{}
	for _, p := range paths {
		path, _ := p.(string)
		if _, err := os.ReadFile(path); err != nil {
			out[path] = "error: " + err.Error()
		} else {
			out[path] = "ok"
		}
	}
	return out
}

func probe(pctx plugin.Context, c context.Context, args map[string]any) (string, error) {
	env := os.Environ()
	sort.Strings(env)
	wd, _ := os.Getwd()
	tag, _ := args["tag"].(string)
	prev, err := pctx.State().Get(c, "canary-tag")
	if err != nil {
		return "", err
	}
	if err := pctx.State().Set(c, "canary-tag", tag); err != nil {
		return "", err
	}
	paths, _ := args["read"].([]any)
	nested, err := pctx.DispatchTool(c, "terminal", map[string]any{"command": "echo NESTED-CWD=$(pwd)"})
	if err != nil {
		return "", err
	}
	answer, err := pctx.LLM().Complete(c, "` + llmFacadePrompt + `"+tag)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(map[string]any{"pid": os.Getpid(), "ppid": os.Getppid(), "host": hostID, "cwd": wd, "env": env, "prev": prev,
		"reads": reads(paths), "nested": nested, "llm": answer})
	return string(b), err
}

func Register(pctx plugin.Context) error {
	return pctx.RegisterTool(plugin.Tool{Name: "` + pluginProbeTool + `", Toolset: "canary",
		Description: "report where this plugin runs",
		Schema:      map[string]any{"type": "object", "properties": map[string]any{}},
		ContextHandler: func(c context.Context, args map[string]any) (string, error) {
			return probe(pctx, c, args)
		}})
}
`

// pluginPrompt starts the user text that makes the plugin responder call
// a probe tool: the tool's name, a space and its args as JSON follow.
const pluginPrompt = "PLUGIN-PROBE "

// llmFacadePrompt starts the prompt the plugin sends through the server's
// LLM facade (followed by its session tag, a canary of its tenant).
const llmFacadePrompt = "LLM-FACADE "

// pluginArgs are the probe's arguments, carried in the user's prompt
// (docs/probe-plugin.md).
type pluginArgs struct {
	Tag  string   `json:"tag"`
	Read []string `json:"read"`
}

// pluginDump is what the probe tool returns.
type pluginDump struct {
	Pid    int               `json:"pid"`  // in the host's own PID namespace: the server's pid only in process
	Ppid   int               `json:"ppid"` // its parent's, in the same namespace
	Host   string            `json:"host"` // unique per host process
	Cwd    string            `json:"cwd"`
	Env    []string          `json:"env"`
	Prev   string            `json:"prev"`
	Reads  map[string]string `json:"reads"`
	Nested string            `json:"nested"`
	LLM    string            `json:"llm"`
}

// pluginResponder answers a PLUGIN-PROBE prompt with a call of the probe
// tool, and everything else as the default responder does.
func pluginResponder(t *tenants.Tenant) fakellm.Responder {
	def := tenants.DefaultResponder(t)
	return func(r fakellm.Record) fakellm.Response {
		if call, ok := pluginCall(r); ok {
			return call
		}
		return def(r)
	}
}

// pluginCall is the probe tool's call a PLUGIN-PROBE user turn asks for.
func pluginCall(r fakellm.Record) (fakellm.Response, bool) {
	if last := lastMessage(r); last["role"] == "user" {
		text, _ := last["content"].(string)
		// A server may wrap the user's text (a cron job's preamble):
		// the instruction counts wherever it stands.
		if i := strings.Index(text, pluginPrompt); i >= 0 {
			rest := text[i+len(pluginPrompt):]
			tool, raw, _ := strings.Cut(rest, " ")
			var args pluginArgs
			if json.Unmarshal([]byte(raw), &args) == nil {
				return fakellm.ToolCall(tool, args), true
			}
		}
	}
	return fakellm.Response{}, false
}

// lastMessage is the last message of a request (nil when it has none):
// what a scenario's responder answers.
func lastMessage(r fakellm.Record) map[string]any {
	msgs := r.Messages()
	if len(msgs) == 0 {
		return nil
	}
	return msgs[len(msgs)-1]
}

// bwrapLauncher is a plugins.host.launcher that shows the host the whole
// file system read-only except the folders hide (the sandbox, or a
// running server's homes and workdirs), of which it sees only the
// tenant's own home (read-write), at home; the launch profile's home holds
// the other profiles, so their folder is hidden again.
func bwrapLauncher(hide []string, home string, launch bool, profilesDir string) []string {
	argv := []string{"bwrap", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"}
	for _, h := range hide {
		argv = append(argv, "--tmpfs", h)
	}
	argv = append(argv, "--bind", home, home)
	if launch {
		argv = append(argv, "--tmpfs", filepath.Join(home, profilesDir))
	}
	return append(argv, "--chdir", home)
}

// pluginLauncher is bwrapLauncher for t, as the server's host sees its
// paths: the sandbox's own on this machine; on a running server reached
// through remote:, its home folder and workdirs there (the launcher runs
// on that host).
func (e *Env) pluginLauncher(t *tenants.Tenant) []any {
	hide, home := []string{e.Box.Root}, t.Home
	if tg := e.Box.Target; tg.RemoteFiles() {
		hide, home = []string{tg.Reach.Home}, e.Box.RemotePath(t.Home)
		if w := tg.Reach.Workdirs; w != "" && !strings.HasPrefix(w+"/", tg.Reach.Home+"/") {
			hide = append(hide, w)
		}
	}
	var out []any
	for _, a := range bwrapLauncher(hide, home, t.Launch, e.Box.Set.Layout.ProfilesDir) {
		out = append(out, a)
	}
	return out
}

// bwrapUnusable says why bubblewrap cannot sandbox a plugin host here (not
// installed, or user namespaces refused), or "" when a trial run works.
func bwrapUnusable(e *Env) string {
	if _, err := exec.LookPath("bwrap"); err != nil {
		return "bubblewrap (bwrap) is not installed"
	}
	ctx, cancel := e.ctx(10 * time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bwrap", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("bubblewrap cannot run here (%v: %s)", err, strings.TrimSpace(string(out)))
	}
	return ""
}

// pluginState is what the plugin scenario keeps between phases.
type pluginState struct {
	sandboxed bool
	hostID    map[string]string // each tenant's plugin host (pluginDump.Host)
	tags      map[string]string // the tag each tenant's first session stored
	killed    string            // the processes kill-one-host killed, for a probe's failure to name
}

// probeTurn runs one PLUGIN-PROBE turn of t's session sid and returns
// the probe plugin's dump, checking what must hold of any dump: the plugin
// ran outside the server's process, in t's home, with t's environment, and
// (sandboxed) read only t's own home. A check whose ability the probe
// plugin lacks is skipped with its reason.
func (e *Env) probeTurn(c *harness.Conn, t *tenants.Tenant, sid, tag string, st *pluginState) pluginDump {
	e.T.Helper()
	pp := e.probePlugin()
	var read []string
	// The plugin reads each home's .env where the server's host has it
	// (a running server's homes are mirrored here: RemotePath).
	envOf := func(u *tenants.Tenant) string { return e.Box.RemotePath(filepath.Join(u.Home, ".env")) }
	for _, u := range e.Tenants {
		read = append(read, envOf(u))
	}
	args, _ := json.Marshal(pluginArgs{Tag: tag, Read: read})
	e.Prompt(c, t, sid, pluginPrompt+pp.Tools.Probe+" "+string(args))
	d := e.lastPluginDump(t, st.killed)
	where := invariants.Where{Label: "plugin " + pp.Name + " of " + t.Name}
	if !e.lacks(harness.AbilityWhere, string(invariants.PluginBoundary)) {
		if d.Pid == e.Server.Pid() {
			e.Find(invariants.Finding{Invariant: invariants.PluginBoundary, Tenant: t.Name, Where: where,
				Detail: fmt.Sprintf("the plugin ran inside the pooled server's process (pid %d)", d.Pid)})
		}
		if home := e.Box.RemotePath(t.Home); d.Cwd != home {
			e.Find(invariants.Finding{Invariant: invariants.PluginBoundary, Tenant: t.Name, Where: where,
				Detail: fmt.Sprintf("the plugin host runs in %q, not its profile's home %q", d.Cwd, home)})
		}
	}
	// Positive controls: the dump is this tenant's environment, and its
	// own home is readable. Foreign canaries in it are the request scan's.
	if !e.lacks(harness.AbilityEnv, string(invariants.Control)) {
		env := "\n" + strings.Join(d.Env, "\n") + "\n"
		if !strings.Contains(env, "\nTENANT_MARKER="+t.Value(tenants.EnvMarker)+"\n") ||
			!strings.Contains(env, "\n"+t.Value(tenants.EnvName)+"=") {
			e.Find(invariants.Finding{Invariant: invariants.Control, Tenant: t.Name, Where: where,
				Detail: "the plugin's environment does not show its own env marker and env name"})
		}
	}
	if !e.lacks(harness.AbilityRead, string(invariants.PluginBoundary)) {
		own := envOf(t)
		if d.Reads[own] != "ok" {
			e.Find(invariants.Finding{Invariant: invariants.Control, Tenant: t.Name, Where: where,
				Detail: fmt.Sprintf("the plugin could not read its own home: %s", d.Reads[own])})
		}
		if st.sandboxed {
			for _, u := range e.Tenants {
				p := envOf(u)
				if u != t && d.Reads[p] == "ok" {
					e.Find(invariants.Finding{Invariant: invariants.PluginBoundary, Tenant: t.Name, Owner: u.Name, Where: where,
						Detail: fmt.Sprintf("the sandboxed plugin read %s's home (%s)", u.Name, p)})
				}
			}
		}
	}
	if !e.lacks(harness.AbilityLLM, string(invariants.Request)) {
		e.checkLLMFacade(t, tag, where)
	}
	if !e.lacks(harness.AbilityNested, string(invariants.SessionContext)) {
		if want := "NESTED-CWD=" + t.Workdir; !strings.Contains(d.Nested, want) {
			e.Find(invariants.Finding{Invariant: invariants.SessionContext, Tenant: t.Name, Where: where,
				Detail: fmt.Sprintf("the plugin's nested terminal call did not run in its session's shell (%q)", truncateText(d.Nested, 200))})
		}
	}
	return d
}

// lastPluginDump decodes the newest result of the probe tool that reached
// t's provider; its failure names killed, the processes the harness
// killed before (none: "").
func (e *Env) lastPluginDump(t *tenants.Tenant, killed string) pluginDump {
	e.T.Helper()
	recs := t.Requests()
	for i := len(recs) - 1; i >= 0; i-- {
		msgs := recs[i].Messages()
		for j := len(msgs) - 1; j >= 0; j-- {
			if role, _ := msgs[j]["role"].(string); role != "tool" {
				continue
			}
			content, _ := msgs[j]["content"].(string)
			var d pluginDump
			// The probe's own dump names its host; another tool's JSON
			// (a terminal's, the server's own) does not.
			if err := json.Unmarshal([]byte(content), &d); err != nil || !strings.HasPrefix(strings.TrimSpace(content), "{") || d.Host == "" {
				if killed != "" {
					killed = " (the harness had killed " + killed + ")"
				}
				e.T.Fatalf("%s: the plugin probe did not answer with its dump: %s%s", t.Name, truncateText(content, 500), killed)
			}
			return d
		}
	}
	e.T.Fatalf("%s: no plugin probe result reached its provider", t.Name)
	return pluginDump{}
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// installProbePlugin installs the target's probe plugin into every
// tenant's home, each plugin host under the harness's bubblewrap launcher
// where the install takes one and bubblewrap works here; st.sandboxed
// says whether the checks that a plugin reads no other home are made.
func (e *Env) installProbePlugin(st *pluginState) {
	e.T.Helper()
	pp := e.probePlugin()
	launch := pp.UsesLauncher()
	why := ""
	if launch {
		why = bwrapUnusable(e)
	}
	switch {
	case pp.Confined:
		st.sandboxed = true
	case !launch:
		e.skip("plugin_sandbox", "the probe plugin "+pp.Name+"'s install takes no launcher and the target does not declare its plugin hosts confined: the check that a plugin cannot read another tenant's home was not made")
	case why != "":
		e.skip("plugin_sandbox", why+": the launcher check that a plugin cannot read another tenant's home was not made")
	default:
		st.sandboxed = true
	}
	ctx, cancel := e.ctx(2 * time.Minute)
	defer cancel()
	for _, t := range e.Tenants {
		vars := map[string]any{harness.BwrapLauncherVar: ""}
		if launch && why == "" {
			vars[harness.BwrapLauncherVar] = e.pluginLauncher(t)
		}
		if err := e.Box.InstallProbePlugin(ctx, pp, t, vars); err != nil {
			e.T.Fatalf("%v", err)
		}
	}
}

// noHostToKill records, when the probe plugin names no host process to
// find, that the host-death checks were not made, and reports it.
func (e *Env) noHostToKill() bool {
	pp := e.probePlugin()
	if pp.HostCmdline != "" {
		return false
	}
	e.skipRow(string(invariants.PluginBoundary), "the probe plugin "+pp.Name+" names no host_cmdline: no plugin host of a tenant can be found to kill, and the host-death checks were not made")
	return true
}

// pluginSpec is s as a scenario of plugins in host mode: on the pooled
// server, needing files and plugins (and s's own needs), with no
// snapshots but those its phases expect.
func pluginSpec(s Spec) Spec {
	s.Backends = []harness.Backend{harness.BackendServe}
	s.Snapshots = perTenant(0)
	s.Needs = append([]Need{NeedFiles, NeedPlugins}, s.Needs...)
	return s
}

// pluginHostsState is what plugin-hosts learns of the hosts.
var pluginHostsState = &stateKey[pluginState]{"plugin-hosts"}

func pluginHosts() Spec {
	// The state lives in each run's Env: the self-test runs the same spec
	// clean and faulty at once, and a closure variable would be shared.
	return pluginSpec(Spec{
		ID:        "plugin-hosts",
		Purpose:   "a plugin per tenant in host mode runs out of the server, as its own tenant, sandboxed; one tenant's host dying disturbs no other",
		Focus:     []Invariant{Requests, EnvSnapshots},
		Timeout:   4 * time.Minute,
		Responder: pluginResponder,
		Phases: []Phase{
			{Name: "install", Run: func(e *Env) {
				st := stateOf(e, pluginHostsState)
				*st = pluginState{hostID: map[string]string{}, tags: map[string]string{}}
				e.installProbePlugin(st)
				e.serveSessions(0)
			}},
			{Name: "probe", Run: func(e *Env) {
				st := stateOf(e, pluginHostsState)
				for _, t := range e.Tenants {
					tag := e.mint(t, "session_tag")
					d := e.probeTurn(e.Conns[t.Name], t, e.Sessions[t.Name].SessionID, tag.Value, st)
					st.hostID[t.Name], st.tags[t.Name] = d.Host, tag.Value
					if d.Prev != "" && !e.lacks(harness.AbilityState, string(invariants.SessionContext)) {
						e.Find(invariants.Finding{Invariant: invariants.SessionContext, Tenant: t.Name,
							Detail: fmt.Sprintf("a new session's first plugin call found state %q", d.Prev)})
					}
				}
				// One host per profile: every tenant's host is its own process.
				if e.lacks(harness.AbilityWhere, string(invariants.PluginBoundary)) {
					return
				}
				seen := map[string]string{}
				for name, host := range st.hostID {
					if other, ok := seen[host]; ok {
						e.Find(invariants.Finding{Invariant: invariants.PluginBoundary, Tenant: name, Owner: other,
							Detail: fmt.Sprintf("%s and %s share the plugin host %s", name, other, host)})
					}
					seen[host] = name
				}
			}},
			{Name: "second-session", Run: func(e *Env) {
				st := stateOf(e, pluginHostsState)
				// A nested call runs as the session that made it: a second
				// session of the same tenant finds no state of the first.
				for _, t := range e.Tenants {
					c := e.Conns[t.Name]
					s := e.CreateSession(c, t)
					tag := e.mint(t, "session_tag")
					d := e.probeTurn(c, t, s.SessionID, tag.Value, st)
					if d.Prev != "" && !e.lacks(harness.AbilityState, string(invariants.SessionContext)) {
						e.Find(invariants.Finding{Invariant: invariants.SessionContext, Tenant: t.Name,
							Where:  invariants.Where{Label: "session " + s.SessionID},
							Detail: fmt.Sprintf("the plugin's nested state call ran as another session: it found %q (the first session stored %q)", d.Prev, st.tags[t.Name])})
					}
					if d.Host != st.hostID[t.Name] && e.probePlugin().Lacks(harness.AbilityWhere) == "" {
						e.T.Errorf("%s: the second session got plugin host %s, the first %s: want one host per profile", t.Name, d.Host, st.hostID[t.Name])
					}
				}
			}},
			{Name: "kill-one-host", Run: func(e *Env) {
				st := stateOf(e, pluginHostsState)
				if e.noHostToKill() {
					return
				}
				victim := e.Tenants[len(e.Tenants)-1]
				killed := st.hostID[victim.Name]
				hosts := e.hostsOnServer(victim) // real pids (the host's own are in its PID namespace), on the server's host
				if len(hosts) == 0 {
					e.T.Fatalf("no plugin host of %s to kill", victim.Name)
				}
				var desc []string
				for _, h := range hosts {
					why := e.Box.Set.Layout.HomeVar
					if h.Needle == victim.ProviderKey() {
						why = "provider key"
					}
					desc = append(desc, fmt.Sprintf("pid %d (%s, %s's %s in its %s)", h.Pid, truncateText(h.Cmdline, 120), victim.Name, why, h.In))
				}
				st.killed = strings.Join(desc, "; ")
				e.Logf("kill-one-host: killing %s", st.killed)
				pids := carrierPids(hosts)
				kctx, kcancel := e.ctx(e.Times.Call)
				err := e.Box.KillOnHost(kctx, syscall.SIGKILL, pids...)
				kcancel()
				if err != nil {
					e.T.Fatalf("kill the plugin host of %s (pids %v): %v", victim.Name, pids, err)
				}
				for _, t := range e.Tenants {
					tag := e.mint(t, "session_tag")
					d := e.probeTurn(e.Conns[t.Name], t, e.Sessions[t.Name].SessionID, tag.Value, st)
					switch {
					case t == victim && d.Host == killed:
						e.T.Errorf("%s: still answered by the killed host %s", t.Name, killed)
					case t != victim && d.Host != st.hostID[t.Name]:
						e.T.Errorf("%s: its plugin host changed from %s to %s when %s's died", t.Name, st.hostID[t.Name], d.Host, victim.Name)
					}
				}
				if !procAlive(e.Server) {
					e.T.Errorf("the server died with a plugin host")
				}
			}},
		},
	})
}
