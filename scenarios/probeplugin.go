package scenarios

import (
	"debug/buildinfo"
	"path/filepath"
	"strings"
	"sync"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/attack"
)

// AgentdProbePlugin is the embedded agentd's probe plugin, the default of
// a target file with no probe_plugin block: two plugins in agentd's format
// (Go source run by yaegi in the tenant's plugin host), the probe
// (PluginName) and harness/attack's hostile plugin, installed under
// plugins/ in every tenant's home and run in host mode. plugin-hosts hands
// each host the harness's bubblewrap launcher where it works; the hostile
// run sets the operator's host limits its hog outruns.
func AgentdProbePlugin() *harness.ProbePlugin {
	return agentdProbePlugin(attack.HostMemoryLimit)
}

// agentdProbePlugin is AgentdProbePlugin with the hostile run's host
// memory limit memLimit.
func agentdProbePlugin(memLimit string) *harness.ProbePlugin {
	return &harness.ProbePlugin{
		Name: PluginName,
		Files: map[string]string{
			PluginName + "/plugin.yaml":        "name: " + PluginName + "\nversion: \"1.0\"\nkind: general\n",
			PluginName + "/plugin.go":          pluginSource,
			attack.PluginName + "/plugin.yaml": attack.PluginManifest,
			attack.PluginName + "/plugin.go":   attack.PluginSource,
		},
		Install: harness.PluginInstall{
			Path: "plugins",
			Config: map[string]any{"plugins": map[string]any{
				"enabled":   []any{PluginName, attack.PluginName},
				"isolation": "host",
				"host":      map[string]any{"launcher": "{" + harness.BwrapLauncherVar + "}"},
			}},
			Limits: map[string]any{"plugins": map[string]any{"isolation": "host",
				"host": map[string]any{"call_timeout": attack.HostCallTimeout, "memory_limit": memLimit}}},
			// What a tenant would write in its .env to turn its host's
			// keeper off (the host-env-trusted fault honours it).
			HostileEnv: map[string]string{"AGENTD_PLUGIN_HOST_KEEPER": "inner"},
		},
		Tools:       harness.PluginTools{Probe: pluginProbeTool, Hostile: attack.PluginTool},
		HostCmdline: "plugin-host",
	}
}

// probePluginOf is target's probe plugin: its own, else agentd's, with
// the host memory limit its binary needs (hostMemoryLimitOf).
func probePluginOf(target harness.Target) *harness.ProbePlugin {
	if target.ProbePlugin != nil {
		return target.ProbePlugin
	}
	return agentdProbePlugin(hostMemoryLimitOf(target))
}

// hostMemoryLimitOf is the hostile run's host memory limit for target:
// attack.HostMemoryLimitPlain when its server is agentd as this module
// builds it (canary-run, cmd/agentd, a test binary of this module)
// without the race detector, whose plugin hosts are the same binary and
// were measured under it; attack.HostMemoryLimit otherwise: a race build,
// another module's binary (a server that embeds agentd's plugin host
// among its own code), or a program whose build cannot be read (a wrapper
// script, say) gets the limit any build loads its plugins under.
func hostMemoryLimitOf(target harness.Target) string {
	if plain, ok := plainAgentdBuild(programOf(target.Serve)); ok && plain {
		return attack.HostMemoryLimitPlain
	}
	return attack.HostMemoryLimit
}

// programOf is the program argv runs: argv[0], or the one env runs after
// its NAME=VALUE arguments (certify.Command re-executes a binary as
// "env TENANTCANARY_COMMAND=agentd BINARY ..."); "" when env is given
// anything else first (an option).
func programOf(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	if filepath.Base(argv[0]) != "env" {
		return argv[0]
	}
	for _, a := range argv[1:] {
		if strings.HasPrefix(a, "-") {
			return ""
		}
		if !strings.Contains(a, "=") {
			return a
		}
	}
	return ""
}

// agentdModule is the module whose builds hostMemoryLimitOf knows.
const agentdModule = "github.com/tenantcanary/tenantcanary"

// plainBuilds memoizes plainAgentdBuild: a run asks once per scenario.
var plainBuilds sync.Map // path -> [2]bool{plain, ok}

// plainAgentdBuild reports whether the Go binary at path is a build of
// agentdModule without the race detector; ok is false when path is not a
// Go binary of that module it can read.
func plainAgentdBuild(path string) (plain, ok bool) {
	if path == "" {
		return false, false
	}
	if v, hit := plainBuilds.Load(path); hit {
		r := v.([2]bool)
		return r[0], r[1]
	}
	info, err := buildinfo.ReadFile(path)
	if err == nil && info.Main.Path == agentdModule {
		ok, plain = true, true
		for _, s := range info.Settings {
			if s.Key == "-race" && s.Value == "true" {
				plain = false
			}
		}
	}
	plainBuilds.Store(path, [2]bool{plain, ok})
	return plain, ok
}

// probePlugin is the run's probe plugin, made once per Env. A target's
// own is the target's, shared with every scenario of the run: only its
// methods that change nothing of it (IsHost, Lacks) are called at once.
func (e *Env) probePlugin() *harness.ProbePlugin {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.probePl == nil {
		e.probePl = probePluginOf(e.Box.Target)
	}
	return e.probePl
}

// lacks records, once per reason, that the checks of ability under inv
// were not made (the probe plugin declares it unsupported), and reports
// whether it lacks it.
func (e *Env) lacks(ability, inv string) bool {
	why := e.probePlugin().Lacks(ability)
	if why == "" {
		return false
	}
	e.skipRow(inv, "the probe plugin "+e.probePlugin().Name+" cannot "+abilityText[ability]+": "+why)
	return true
}

// abilityText says what each ability is, for a skip's reason.
var abilityText = map[string]string{
	harness.AbilityWhere:   "report where it runs (pid, parent, host, working folder)",
	harness.AbilityRead:    "read a path and report what it got",
	harness.AbilityEnv:     "report its environment",
	harness.AbilityNested:  "make a nested call into the server as its session",
	harness.AbilityLLM:     "call the server's LLM facade as its session",
	harness.AbilityState:   "keep state by key in its session",
	harness.AbilityHostile: "run a hostile step",
	harness.AbilityHog:     "hog its host past the call's deadline",
}

// hostileRows are rows with their calls made to the probe plugin's
// hostile tool (harness/attack writes them for agentd's).
func (e *Env) hostileRows(rows []attack.Row) []attack.Row {
	tool := e.probePlugin().Tools.Hostile
	out := make([]attack.Row, len(rows))
	for i, r := range rows {
		call := r.Call
		r.Call = func(c attack.Canaries) attack.Call {
			got := call(c)
			if got.Tool == attack.PluginTool {
				got.Tool = tool
			}
			return got
		}
		out[i] = r
	}
	return out
}

// ping is attack.Ping made to the probe plugin's hostile tool.
func (e *Env) ping() attack.Call {
	c := attack.Ping()
	c.Tool = e.probePlugin().Tools.Hostile
	return c
}
