package profile

import (
	"sort"
	"strings"
)

// credential-shaped names: a variable whose name ends or starts with one of
// these never passes from agentd's own environment to a tool subprocess.
var (
	scrubSuffixes = []string{"_API_KEY", "_TOKEN", "_SECRET", "_SECRET_KEY", "_ACCESS_KEY", "_KEY_ID", "_KEY", "_PASSWORD", "_PASS", "_BASE_URL", "_CREDENTIALS"}
	scrubPrefixes = []string{"AGENTD_", "OPENAI", "ANTHROPIC", "OPENROUTER", "AWS_", "AZURE_", "GOOGLE_", "GEMINI", "XAI_", "LLM_", "TENANT_", "API_SERVER_", "CANARY_", "GITHUB_", "GH_"}
	scrubExact    = map[string]bool{
		"HOME": true, "PWD": true, "OLDPWD": true, "SSH_AUTH_SOCK": true, "DBUS_SESSION_BUS_ADDRESS": true,
		"XDG_RUNTIME_DIR": true, "XDG_CONFIG_HOME": true, "XDG_DATA_HOME": true, "XDG_STATE_HOME": true, "XDG_CACHE_HOME": true,
		"HISTFILE": true, "PS1": true, "PROMPT_COMMAND": true, "BASH_ENV": true, "ENV": true,
	}
)

// Credential reports whether a variable name is credential-shaped (and so
// never inherited from agentd's own environment).
func Credential(name string) bool {
	u := strings.ToUpper(name)
	for _, s := range scrubSuffixes {
		if strings.HasSuffix(u, s) {
			return true
		}
	}
	for _, p := range scrubPrefixes {
		if strings.HasPrefix(u, p) {
			return true
		}
	}
	return false
}

// Scrub returns the entries of environ (NAME=VALUE) that may pass to a
// tool subprocess of any profile: nothing credential-shaped, nothing naming
// a home.
func Scrub(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" || scrubExact[name] || Credential(name) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// ToolEnv is the environment of a subprocess run for profile p: the
// scrubbed base, then the profile's .env, then HOME and AGENTD_HOME set to
// the profile's home. The result is sorted and has one entry per name.
func ToolEnv(base []string, p Profile, env Env) []string {
	m := map[string]string{}
	for _, kv := range Scrub(base) {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	for _, v := range env {
		m[v.Name] = v.Value
	}
	m["HOME"] = p.Home
	m["AGENTD_HOME"] = p.Home
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
