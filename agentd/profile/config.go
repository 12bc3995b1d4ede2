package profile

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tenantcanary/tenantcanary/agentd/homefs"
	"github.com/tenantcanary/tenantcanary/internal/docclone"
	"github.com/tenantcanary/tenantcanary/internal/dotpath"
	"github.com/tenantcanary/tenantcanary/internal/lru"
	"github.com/tenantcanary/tenantcanary/isolation"
)

// PluginProviderPrefix starts a model.provider served by a plugin model
// provider of the profile's own: "plugin:<name>", name being the model's
// ModelProfile.Name. Its base URL and key variables come from the plugin
// when model.base_url and model.key_env do not set them.
const PluginProviderPrefix = "plugin:"

// Config is a profile's effective configuration: the managed scope
// deep-merged over the profile's own config.yaml.
type Config struct {
	Model struct {
		Provider      string `yaml:"provider"`
		BaseURL       string `yaml:"base_url"`
		Default       string `yaml:"default"`
		KeyEnv        string `yaml:"key_env"`
		ContextLength int    `yaml:"context_length"`
	} `yaml:"model"`
	Agent struct {
		APIMaxRetries *int `yaml:"api_max_retries"`
	} `yaml:"agent"`
	Terminal struct {
		Backend string `yaml:"backend"`
		Cwd     string `yaml:"cwd"`
		Sandbox string `yaml:"sandbox"` // auto | bwrap | landlock | none: see TerminalSandbox
	} `yaml:"terminal"`
	Memory struct {
		MemoryEnabled *bool `yaml:"memory_enabled"`
	} `yaml:"memory"`
	CustomPrompt string `yaml:"custom_prompt"`
	Plugins      struct {
		Enabled   []string `yaml:"enabled"`
		Isolation string   `yaml:"isolation"`
		Host      struct {
			// Launcher is a list, or one string split with shell
			// quoting rules. The limits (plugins.host.call_timeout,
			// memory_limit, ...) are read by isolation.Resolve.
			Launcher isolation.Argv `yaml:"launcher"`
		} `yaml:"host"`
	} `yaml:"plugins"`
	Gateway struct {
		APIServer struct {
			Enabled bool   `yaml:"enabled"`
			Host    string `yaml:"host"`
			Port    int    `yaml:"port"`
		} `yaml:"api_server"`
	} `yaml:"gateway"`

	// Raw is the merged document, for keys this struct does not name
	// (plugin settings, say).
	Raw map[string]any `yaml:"-"`
	// Ignored are the operator-only keys the profile's own config.yaml
	// set, which were ignored (see OperatorOnly).
	Ignored []IgnoredKey `yaml:"-"`
}

// MaxRetries is agent.api_max_retries, 2 when unset.
func (c *Config) MaxRetries() int {
	if c.Agent.APIMaxRetries == nil {
		return 2
	}
	return *c.Agent.APIMaxRetries
}

// MemoryEnabled is memory.memory_enabled, true when unset.
func (c *Config) MemoryEnabled() bool {
	return c.Memory.MemoryEnabled == nil || *c.Memory.MemoryEnabled
}

// ErrBadConfig marks a config.yaml that cannot be parsed or holds a value of
// the wrong type; the message names the file and line.
var ErrBadConfig = errors.New("bad config")

// LoadConfig reads the profile's config.yaml (through OwnConfig: without
// the keys only the operator may set) and the managed scope's, and merges
// the managed one over the profile's. A missing file is empty; a file that
// does not parse is an error naming it and the line.
//
// Both files are read afresh on every call; what these bytes of these
// files make is kept (loadedConfigs), so a turn that loads the config
// several times parses and decodes it once.
func (p Profile) LoadConfig() (*Config, error) {
	own, err := p.ownConfigBytes()
	if err != nil {
		return nil, err
	}
	managed, err := p.managedConfigBytes()
	if err != nil {
		return nil, err
	}
	key := p.loadKey(own, managed)
	if c, ok := loadedConfigs.Get(key); ok {
		return c.clone(), nil
	}
	c, err := p.loadConfig(own, managed)
	if err != nil {
		return nil, err // not kept: a broken file is read and reported again
	}
	loadedConfigs.Put(key, c.clone())
	return c, nil
}

// loadConfig is LoadConfig from the files' bytes.
func (p Profile) loadConfig(ownData, managedData fileBytes) (*Config, error) {
	own, ignored, err := p.ownConfig(ownData)
	if err != nil {
		return nil, err
	}
	managed, err := managedData.parse()
	if err != nil {
		return nil, err
	}
	merged := Merge(own, managed)
	cfg := &Config{}
	data, err := yaml.Marshal(merged)
	if err != nil {
		return nil, fmt.Errorf("encode merged config of profile %q: %w", p.Name, err)
	}
	if err := yaml.Unmarshal(data, cfg); err != nil {
		return nil, fmt.Errorf("%w: merged config of profile %q: %v", ErrBadConfig, p.Name, err)
	}
	cfg.Raw, cfg.Ignored = merged, ignored
	if cfg.Terminal.Cwd == "" {
		cfg.Terminal.Cwd = p.Home
	}
	if cfg.Terminal.Backend == "" {
		cfg.Terminal.Backend = "local"
	}
	if cfg.Model.KeyEnv == "" && cfg.Model.Provider != "" && !strings.HasPrefix(cfg.Model.Provider, PluginProviderPrefix) {
		cfg.Model.KeyEnv = strings.ToUpper(cfg.Model.Provider) + "_API_KEY"
	}
	return cfg, nil
}

// loadedConfigs keeps what LoadConfig made, by everything it is made of
// (loadKey): the profile's name and home, whether it owns its operator
// keys, and both files' paths and bytes. Entries are never handed out
// (callers get clones). Two files per profile: 256 kept.
var loadedConfigs = lru.New[[sha256.Size]byte, *Config](256)

// loadKey names what a LoadConfig of p over these bytes makes.
func (p Profile) loadKey(own, managed fileBytes) [sha256.Size]byte {
	h := sha256.New()
	field := func(s string) {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	field(p.Name)
	field(p.Home)
	field(fmt.Sprint(p.OwnOperatorKeys))
	for _, f := range []fileBytes{own, managed} {
		field(f.path)
		field(fmt.Sprint(f.present, len(f.data)))
		h.Write(f.data)
	}
	var k [sha256.Size]byte
	copy(k[:], h.Sum(nil))
	return k
}

// clone is a copy of c that shares nothing c's callers could change
// (TestConfigCloneSharesNothing holds it to every field of Config).
func (c *Config) clone() *Config {
	out := *c
	out.Agent.APIMaxRetries = clonePtr(c.Agent.APIMaxRetries)
	out.Memory.MemoryEnabled = clonePtr(c.Memory.MemoryEnabled)
	out.Plugins.Enabled = slices.Clone(c.Plugins.Enabled)
	out.Plugins.Host.Launcher = slices.Clone(c.Plugins.Host.Launcher)
	out.Raw = docclone.Map(c.Raw)
	out.Ignored = slices.Clone(c.Ignored)
	return &out
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// fileBytes is a config file as read: its path (as errors name it), and
// its bytes when present.
type fileBytes struct {
	path    string
	data    []byte
	present bool
}

// parse is the file's mapping (see parseYAMLMap); a missing file is empty.
func (f fileBytes) parse() (map[string]any, error) {
	if !f.present {
		return map[string]any{}, nil
	}
	return parseYAMLMap(f.path, f.data)
}

// ownConfigBytes reads the profile's own config.yaml through its home (no
// link followed).
func (p Profile) ownConfigBytes() (fileBytes, error) {
	f := fileBytes{path: p.File("config.yaml")}
	data, err := p.FS().ReadFile("config.yaml")
	if errors.Is(err, os.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return f, fmt.Errorf("read config of profile %q: %w", p.Name, err)
	}
	f.data, f.present = data, true
	return f, nil
}

// readOwnConfig reads the profile's own config.yaml through its home (no
// link followed); a missing file is an empty map.
func (p Profile) readOwnConfig() (map[string]any, error) {
	f, err := p.ownConfigBytes()
	if err != nil {
		return nil, err
	}
	return f.parse()
}

// readYAMLMap reads the YAML mapping at path (the managed scope's
// config.yaml, or a home's), following no link at the file itself: its
// folder is opened by path, so it must be one no tenant can replace (the
// managed folder, or a home: a tenant writes inside its home, never the
// home itself). A missing file is an empty map.
func readYAMLMap(path string) (map[string]any, error) {
	f, err := readYAMLBytes(path)
	if err != nil {
		return nil, err
	}
	return f.parse()
}

// readYAMLBytes reads the file at path as readYAMLMap does.
func readYAMLBytes(path string) (fileBytes, error) {
	f := fileBytes{path: path}
	data, err := homefs.Home{Dir: filepath.Dir(path)}.ReadFile(filepath.Base(path))
	if errors.Is(err, os.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return f, fmt.Errorf("read %s: %w", path, err)
	}
	f.data, f.present = data, true
	return f, nil
}

// parseYAMLMap parses a YAML mapping; empty data is an empty map. It also
// decodes the data into Config so that a value of the wrong type is
// reported against this file's own line numbers. The error names the file
// and the line, never a value of the file (see redactYAML). The caller
// owns the map it gets (a copy of what parsedYAML keeps).
func parseYAMLMap(path string, data []byte) (map[string]any, error) {
	key := parsedKey(path, data)
	if p, ok := parsedYAML.Get(key); ok {
		return docclone.Map(p.m), p.err
	}
	m, err := parseYAMLBytes(path, data)
	parsedYAML.Put(key, yamlParse{m: m, err: err})
	return docclone.Map(m), err
}

// parsedYAML keeps what parseYAMLMap parsed, by file and content: a turn
// reads a profile's config.yaml several times (its scope, its sandbox,
// its workdir, its plugins) and the managed one as often, and parsing YAML
// twice over is most of what a read costs. The bytes are read afresh every
// time, through the home, so a changed file is parsed anew: what is kept is
// what these bytes of this file parse to, never what a file holds now. A
// few files per profile: 256 kept.
var parsedYAML = lru.New[[sha256.Size]byte, yamlParse](256)

// yamlParse is one kept parse; its map is never handed out (callers get
// copies).
type yamlParse struct {
	m   map[string]any
	err error
}

// parsedKey names a file's content: its path and bytes.
func parsedKey(path string, data []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte(path))
	h.Write([]byte{0})
	h.Write(data)
	var k [sha256.Size]byte
	copy(k[:], h.Sum(nil))
	return k
}

// parseYAMLBytes is parseYAMLMap without parsedYAML.
func parseYAMLBytes(path string, data []byte) (map[string]any, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return map[string]any{}, nil
	}
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrBadConfig, path, redactYAML(err))
	}
	var typed Config
	if err := yaml.Unmarshal(data, &typed); err != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrBadConfig, path, redactYAML(err))
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

// Merge returns base with over deep-merged on top: mappings merge key by
// key, anything else in over replaces base's value. Neither input is
// modified.
func Merge(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if om, ok := v.(map[string]any); ok {
			if bm, ok := out[k].(map[string]any); ok {
				out[k] = Merge(bm, om)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// SetConfig sets a dotted key (for example "terminal.cwd") in the profile's
// own config.yaml, atomically. The managed scope is never written.
func (p Profile) SetConfig(key string, value any) error {
	m, err := p.readOwnConfig()
	if err != nil {
		return err
	}
	parts := strings.Split(key, ".")
	for _, part := range parts {
		if part == "" {
			return fmt.Errorf("set config key %q in profile %q: empty path element", key, p.Name)
		}
	}
	dotpath.Set(m, key, value)
	data, err := yaml.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode config of profile %q: %w", p.Name, err)
	}
	if err := p.FS().WriteFileAtomic("config.yaml", data, 0o600); err != nil {
		return fmt.Errorf("set %s in profile %q: %w", key, p.Name, err)
	}
	return nil
}

// redactYAML is a YAML error's text with every quoted value replaced by
// "…": a config.yaml that is (or was linked to) another file must not
// have its content echoed into an error a client sees.
func redactYAML(err error) string {
	return yamlQuotedRE.ReplaceAllString(err.Error(), "…")
}

var yamlQuotedRE = regexp.MustCompile("`[^`]*`|\"(?:[^\"\\\\]|\\\\.)*\"|'[^']*'")

// WriteFileAtomic writes data to a temporary file beside path, syncs it and
// renames it over path, so a reader sees the old file or the new one. It
// opens by plain path: for files outside any home (a home's files go
// through Profile.FS).
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	name := tmp.Name()
	defer os.Remove(name) // a no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(name, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
