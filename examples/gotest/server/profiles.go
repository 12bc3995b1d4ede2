package server

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"

	"gopkg.in/yaml.v3"
)

// profile is one tenant's home. Every file of it is opened through an
// os.Root at the home, so a symlink planted in a home cannot lead out.
type profile struct {
	name string // "" for the launch profile
	home string
}

// config is the part of a profile's config.yaml the server reads.
type config struct {
	Model struct {
		BaseURL string `yaml:"base_url"`
		Default string `yaml:"default"`
		KeyEnv  string `yaml:"key_env"`
	} `yaml:"model"`
	Terminal struct {
		Cwd string `yaml:"cwd"`
	} `yaml:"terminal"`
	Memory struct {
		Enabled bool `yaml:"memory_enabled"`
	} `yaml:"memory"`
	CustomPrompt string `yaml:"custom_prompt"`
}

var profileNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

func launchHome() (string, error) {
	if home := os.Getenv("TINYAGENT_HOME"); home != "" {
		return home, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("TINYAGENT_HOME is not set and there is no home folder: %w", err)
	}
	return filepath.Join(home, ".tinyagent"), nil
}

func (p *pool) profilesDir() string { return filepath.Join(p.launch, "profiles") }

// launchName also names the launch profile.
const launchName = "default"

// profile resolves a profile by name ("" or "default" is the launch
// profile): error 4064 when it does not exist.
func (p *pool) profile(name string) (profile, error) {
	if name == "" || name == launchName {
		return profile{home: p.launch}, nil
	}
	if !profileNameRE.MatchString(name) {
		return profile{}, errorf(codeBadParams, "bad profile name %q: want [a-z0-9_-], at most 64", name)
	}
	home := filepath.Join(p.profilesDir(), name)
	if fi, err := os.Lstat(home); err != nil || !fi.IsDir() {
		return profile{}, errorf(codeUnknownProfile, "unknown profile %q", name)
	}
	return profile{name: name, home: home}, nil
}

func (p *pool) profileNames() ([]string, error) {
	entries, err := os.ReadDir(p.profilesDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list profiles: %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() && profileNameRE.MatchString(e.Name()) && e.Name() != launchName {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

// maxHomeFile bounds what the server reads of any home file: a tenant
// owns its home and may leave a huge (or never-ending) file where a small
// one belongs.
const maxHomeFile = 1 << 20

// readFile reads a home file: a regular one (a FIFO, a device or a folder
// is refused, and opened without blocking), of at most maxHomeFile bytes.
func (pr profile) readFile(name string) ([]byte, error) {
	root, err := os.OpenRoot(pr.home)
	if err != nil {
		return nil, fmt.Errorf("open home %s: %w", pr.home, err)
	}
	defer root.Close()
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("read %s: not a regular file", name)
	}
	if fi.Size() > maxHomeFile {
		return nil, fmt.Errorf("read %s: larger than %d bytes", name, maxHomeFile)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxHomeFile+1))
	if err == nil && len(data) > maxHomeFile {
		err = fmt.Errorf("read %s: larger than %d bytes", name, maxHomeFile)
	}
	return data, err
}

func (pr profile) writeFile(name string, data []byte, mode os.FileMode) error {
	root, err := os.OpenRoot(pr.home)
	if err != nil {
		return fmt.Errorf("open home %s: %w", pr.home, err)
	}
	defer root.Close()
	if err := root.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return root.WriteFile(name, data, mode)
}

func (pr profile) config() (config, error) {
	var cfg config
	data, err := pr.readFile("config.yaml")
	if err != nil {
		return cfg, fmt.Errorf("read config of profile %q: %w", pr.name, err)
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return cfg, fmt.Errorf("parse config of profile %q: %w", pr.name, err)
	}
	return cfg, nil
}

// setConfig sets one key (a dotted path, e.g. terminal.cwd) in the
// profile's config.yaml, keeping every other key.
func (pr profile) setConfig(key string, value any) error {
	doc := map[string]any{}
	data, err := pr.readFile("config.yaml")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("parse config of profile %q: %w", pr.name, err)
	}
	if doc == nil {
		doc = map[string]any{}
	}
	m := doc
	path := strings.Split(key, ".")
	for _, k := range path[:len(path)-1] {
		next, _ := m[k].(map[string]any)
		if next == nil {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[path[len(path)-1]] = value
	out, err := yaml.Marshal(doc)
	if err != nil {
		return err
	}
	return pr.writeFile("config.yaml", out, 0o644)
}

// dotEnv reads the profile's .env: NAME=value lines, values optionally
// double-quoted with \\ \" \n \$ escapes.
func (pr profile) dotEnv() (map[string]string, error) {
	env := map[string]string{}
	data, err := pr.readFile(".env")
	if errors.Is(err, fs.ErrNotExist) {
		return env, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read .env of profile %q: %w", pr.name, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimPrefix(strings.TrimSpace(line), "export ")
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" || strings.HasPrefix(k, "#") {
			continue
		}
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = unquote.Replace(v[1 : len(v)-1])
		}
		env[strings.TrimSpace(k)] = v
	}
	return env, nil
}

var (
	quote   = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, `$`, `\$`)
	unquote = strings.NewReplacer(`\\`, `\`, `\"`, `"`, `\n`, "\n", `\$`, `$`)
)

// setDotEnv sets one variable in the profile's .env, keeping the others.
func (pr profile) setDotEnv(name, value string) error {
	env, err := pr.dotEnv()
	if err != nil {
		return err
	}
	env[name] = value
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(env)) {
		fmt.Fprintf(&b, "%s=\"%s\"\n", k, quote.Replace(env[k]))
	}
	return pr.writeFile(".env", []byte(b.String()), 0o600)
}

// systemPrompt is SOUL.md, the custom prompt and, when memory is on,
// memories/MEMORY.md.
func (pr profile) systemPrompt(cfg config) string {
	var parts []string
	if soul, err := pr.readFile("SOUL.md"); err == nil {
		parts = append(parts, strings.TrimSpace(string(soul)))
	}
	if cfg.CustomPrompt != "" {
		parts = append(parts, cfg.CustomPrompt)
	}
	if cfg.Memory.Enabled {
		if mem, err := pr.readFile("memories/MEMORY.md"); err == nil {
			parts = append(parts, "What you remember:\n"+strings.TrimSpace(string(mem)))
		}
	}
	return strings.Join(parts, "\n\n")
}
