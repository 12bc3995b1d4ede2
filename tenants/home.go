package tenants

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// HomeExtras are additions to what WriteHome plants.
type HomeExtras struct {
	Config map[string]any    // deep-merged over the base config.yaml
	Env    map[string]string // added to .env (overriding a base variable of the same name)
	Files  map[string]string // more files, by path relative to the home (plugins/<name>/..., say)
}

// Config is the base config.yaml of the tenant, before extras: its provider,
// model, key variable, workdir and memory switched on.
func (t *Tenant) Config(layout Layout) map[string]any {
	layout = layout.WithDefaults()
	base := t.ProviderURL()
	return map[string]any{
		"model": map[string]any{
			"provider": "custom", "base_url": base, "default": t.Model(),
			"key_env": layout.KeyEnv, "context_length": 128000,
		},
		"agent":    map[string]any{"api_max_retries": 1},
		"terminal": map[string]any{"backend": "local", "cwd": t.Workdir},
		"memory":   map[string]any{"memory_enabled": true},
	}
}

// DotEnv is the tenant's base .env: the variables every tenant shares by
// name with its own values, and the one variable whose NAME only this tenant
// has (so environments merged in either order show the foreign one).
func (t *Tenant) DotEnv(layout Layout) map[string]string {
	layout = layout.WithDefaults()
	return map[string]string{
		layout.KeyEnv:          t.ProviderKey(),
		layout.APIServerKeyEnv: t.APIServerKey(),
		layout.MarkerEnv:       t.Value(EnvMarker),
		t.Value(EnvName):       t.Value(EnvMarker),
	}
}

// WriteHome writes the tenant's home: config.yaml (with extras deep-merged),
// .env, memories/MEMORY.md and SOUL.md.
func (t *Tenant) WriteHome(layout Layout, extras HomeExtras) error {
	if err := os.MkdirAll(filepath.Join(t.Home, "memories"), 0o755); err != nil {
		return fmt.Errorf("create home of %s: %w", t.Name, err)
	}
	cfg := DeepMerge(t.Config(layout), extras.Config)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(cfg); err != nil {
		return fmt.Errorf("encode config.yaml of %s: %w", t.Name, err)
	}
	env := t.DotEnv(layout)
	for k, v := range extras.Env {
		env[k] = v
	}
	files := map[string][]byte{
		"config.yaml":        buf.Bytes(),
		".env":               FormatDotEnv(env),
		"memories/MEMORY.md": []byte(t.Value(Memory) + "\n"),
		"SOUL.md":            []byte("You are " + t.Value(Soul) + ".\n"),
	}
	for rel, data := range extras.Files {
		if filepath.IsAbs(rel) || !filepath.IsLocal(rel) {
			return fmt.Errorf("write home of %s: extra file %q is not a path inside the home", t.Name, rel)
		}
		if _, ok := files[rel]; ok {
			return fmt.Errorf("write home of %s: extra file %q would replace a planted one", t.Name, rel)
		}
		if err := os.MkdirAll(filepath.Join(t.Home, filepath.Dir(rel)), 0o755); err != nil {
			return fmt.Errorf("write home of %s: %w", t.Name, err)
		}
		files[rel] = []byte(data)
	}
	for rel, data := range files {
		mode := os.FileMode(0o644)
		if rel == ".env" {
			mode = 0o600
		}
		if err := os.WriteFile(filepath.Join(t.Home, rel), data, mode); err != nil {
			return fmt.Errorf("write %s of %s: %w", rel, t.Name, err)
		}
	}
	return nil
}

// DeepMerge returns base with over merged in: maps merge key by key, any
// other value in over replaces the one in base. Neither input is changed.
func DeepMerge(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		bm, bok := out[k].(map[string]any)
		om, ook := v.(map[string]any)
		if bok && ook {
			out[k] = DeepMerge(bm, om)
			continue
		}
		out[k] = v
	}
	return out
}

// FormatDotEnv renders variables as NAME=value lines, sorted by name, with
// values double-quoted where they hold anything but plain characters.
func FormatDotEnv(env map[string]string) []byte {
	var b bytes.Buffer
	for _, k := range slices.Sorted(maps.Keys(env)) {
		v := env[k]
		if strings.ContainsAny(v, " \t\"'#$\\\n=") {
			v = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, `$`, `\$`).Replace(v) + `"`
		}
		fmt.Fprintf(&b, "%s=%s\n", k, v)
	}
	return b.Bytes()
}

// HomeFiles is a tenant home read back.
type HomeFiles struct {
	Config map[string]any
	Env    map[string]string
	Memory string
	Soul   string
}

// ReadHome reads back what WriteHome wrote, so a home can be checked to hold
// exactly what was planted.
func ReadHome(home string) (HomeFiles, error) {
	var h HomeFiles
	data, err := os.ReadFile(filepath.Join(home, "config.yaml"))
	if err != nil {
		return h, fmt.Errorf("read home: %w", err)
	}
	if err := yaml.Unmarshal(data, &h.Config); err != nil {
		return h, fmt.Errorf("parse %s: %w", filepath.Join(home, "config.yaml"), err)
	}
	envPath := filepath.Join(home, ".env")
	data, err = os.ReadFile(envPath)
	if err != nil {
		return h, fmt.Errorf("read home: %w", err)
	}
	if h.Env, err = ParseDotEnv(data); err != nil {
		return h, fmt.Errorf("parse %s: %w", envPath, err)
	}
	mem, err := os.ReadFile(filepath.Join(home, "memories", "MEMORY.md"))
	if err != nil {
		return h, fmt.Errorf("read home: %w", err)
	}
	soul, err := os.ReadFile(filepath.Join(home, "SOUL.md"))
	if err != nil {
		return h, fmt.Errorf("read home: %w", err)
	}
	h.Memory, h.Soul = string(mem), string(soul)
	return h, nil
}

// ParseDotEnv reads the NAME=value lines FormatDotEnv writes (plus blank
// lines, comments and an "export " prefix); a malformed line is an error
// naming its number.
func ParseDotEnv(data []byte) (map[string]string, error) {
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("line %d: want NAME=value", n)
		}
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = strings.NewReplacer(`\\`, `\`, `\"`, `"`, `\n`, "\n", `\$`, `$`).Replace(v[1 : len(v)-1])
		}
		env[strings.TrimSpace(k)] = v
	}
	return env, sc.Err()
}
