package tenants

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strings"
)

// ErrRealHome is returned when a sandbox HOME is, or holds, the real user's
// home: a child anchored there could read or write real credentials.
var ErrRealHome = errors.New("sandbox home is or holds the real user's home")

var (
	credentialSuffixes = []string{"_API_KEY", "_TOKEN", "_SECRET", "_KEY", "_KEY_ID", "_ACCESS_KEY", "_BASE_URL"}
	vendorPrefixes     = []string{
		"OPENAI", "ANTHROPIC", "OPENROUTER", "AWS_", "AZURE_", "GOOGLE_", "GCLOUD_", "GEMINI", "XAI_",
		"MISTRAL", "GROQ", "COHERE", "DEEPSEEK", "TOGETHER_", "HF_", "HUGGING", "NOUS_", "LLM_",
		"TENANT_", "CANARY_", "API_SERVER_", "CUSTOM_", "TERMINAL_",
	}
	// Names that carry credentials or reach services outside the sandbox
	// without looking like it.
	droppedNames = []string{
		"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "FTP_PROXY", "NO_PROXY",
		"http_proxy", "https_proxy", "all_proxy", "ftp_proxy", "no_proxy",
		"DBUS_SESSION_BUS_ADDRESS", "SSH_AUTH_SOCK", "GPG_AGENT_INFO", "KUBECONFIG",
		"DOCKER_CONFIG", "DOCKER_HOST", "NETRC", "GIT_ASKPASS", "SSH_ASKPASS", "PGPASSFILE",
	}
)

// RealHomes lists the real user's home directories as the account database
// and the current HOME name them, resolved; either may be missing.
func RealHomes() []string {
	var out []string
	add := func(p string) {
		if p == "" {
			return
		}
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		out = append(out, filepath.Clean(p))
	}
	if u, err := user.Current(); err == nil {
		add(u.HomeDir)
	}
	add(os.Getenv("HOME"))
	return out
}

// CheckSandboxHome refuses a HOME that is the real user's home or holds it.
func CheckSandboxHome(home string) error {
	abs, err := filepath.Abs(home)
	if err != nil {
		return fmt.Errorf("resolve sandbox home %q: %w", home, err)
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	for _, real := range RealHomes() {
		if abs == real || within(real, abs) {
			return fmt.Errorf("%w: %s (real home %s)", ErrRealHome, abs, real)
		}
	}
	return nil
}

// within reports whether path lies strictly inside dir.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

// stripped reports whether a variable of the parent must not reach a child.
func stripped(name string, layout Layout) bool {
	for _, s := range credentialSuffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	for _, p := range append(vendorPrefixes, layout.VarPrefixes...) {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	if strings.HasPrefix(name, "XDG_") {
		return true
	}
	for _, d := range droppedNames {
		if name == d {
			return true
		}
	}
	return false
}

// awayFromHomes keeps a variable only if it does not point into a real
// home (a config file, a tool's state): a search path keeps its other
// entries.
func awayFromHomes(name, value string, reals []string) (string, bool) {
	inHome := func(p string) bool {
		for _, r := range reals {
			if p == r || within(p, r) {
				return true
			}
		}
		return false
	}
	if name == "PATH" || strings.HasSuffix(name, "PATH") {
		var keep []string
		for _, part := range strings.Split(value, ":") {
			if part != "" && !inHome(filepath.Clean(part)) {
				keep = append(keep, part)
			}
		}
		return strings.Join(keep, ":"), len(keep) > 0
	}
	if filepath.IsAbs(value) && inHome(filepath.Clean(value)) {
		return "", false
	}
	return value, true
}

// HermeticEnv builds a child environment from base (usually os.Environ()):
// everything credential-shaped, vendor- or target-prefixed, proxy and XDG
// variables removed, and every variable that points into the real user's
// home (search paths lose those entries); HOME set to home and the layout's home variable to the
// launch folder under it; then extra applied. The result is sorted. It
// refuses a home that is, or holds, the real user's home.
func HermeticEnv(base []string, home string, layout Layout, extra map[string]string) ([]string, error) {
	layout = layout.WithDefaults()
	if err := CheckSandboxHome(home); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(home)
	if err != nil {
		return nil, fmt.Errorf("resolve sandbox home %q: %w", home, err)
	}
	reals := RealHomes()
	env := map[string]string{}
	for _, kv := range base {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" || stripped(name, layout) {
			continue
		}
		if value, ok = awayFromHomes(name, value, reals); ok {
			env[name] = value
		}
	}
	env["HOME"] = abs
	env[layout.HomeVar] = filepath.Join(abs, layout.LaunchDir)
	env["NO_COLOR"] = "1"
	env["TERM"] = "dumb"
	env["NO_PROXY"] = "127.0.0.1,localhost,::1"
	env["no_proxy"] = env["NO_PROXY"]
	for k, v := range extra {
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out, nil
}
