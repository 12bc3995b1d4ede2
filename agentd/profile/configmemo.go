package profile

import (
	"slices"
	"strconv"
	"strings"
	"sync"
)

// configMemo remembers the Configs LoadConfig parsed, by everything the
// parse depends on: the profile's name, home and operator-key trust, the
// managed file's path, and the bytes of both files (read anew at every
// LoadConfig, so an edit is seen at once: a changed byte is another key).
// A server loads a profile's config at every session and turn, and a
// flood of them spent most of its CPU parsing the same few hundred bytes
// of YAML again. What it hands out is a deep copy, so no caller's change
// reaches another's Config.
type configMemo struct {
	mu      sync.Mutex
	entries map[string]*Config
}

// configs is the process's memo.
var configs = &configMemo{entries: map[string]*Config{}}

const (
	// memoMaxBytes bounds the files a memo entry may stand for: a larger
	// config is parsed every time (no tenant grows the memo at will).
	memoMaxBytes = 16 << 10
	// memoMaxEntries bounds the memo; a full memo is emptied.
	memoMaxEntries = 256
)

// configKey is the memo's key for a profile's files, and whether they
// are small enough to memoize.
func configKey(p Profile, own []byte, managedPath string, managed []byte) (string, bool) {
	if len(own)+len(managed) > memoMaxBytes {
		return "", false
	}
	var b strings.Builder
	field := func(s string) { // length-prefixed: no two inputs give one key
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	field(p.Name)
	field(p.Home)
	field(strconv.FormatBool(p.OwnOperatorKeys))
	field(strconv.FormatBool(own != nil))
	field(string(own))
	field(managedPath)
	field(strconv.FormatBool(managed != nil))
	field(string(managed))
	return b.String(), true
}

// get is a copy of the Config memoized under key, or nil.
func (m *configMemo) get(key string) *Config {
	m.mu.Lock()
	cfg := m.entries[key]
	m.mu.Unlock()
	if cfg == nil {
		return nil
	}
	return cloneConfig(cfg)
}

// put memoizes a copy of cfg under key.
func (m *configMemo) put(key string, cfg *Config) {
	c := cloneConfig(cfg)
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.entries) >= memoMaxEntries {
		clear(m.entries)
	}
	m.entries[key] = c
}

// cloneConfig is a deep copy of c: every field of Config that refers to
// memory (pointers, slices, the Raw document) is copied
// (TestCloneConfigCoversEveryReference keeps this list whole).
func cloneConfig(c *Config) *Config {
	out := *c
	if v := c.Agent.APIMaxRetries; v != nil {
		n := *v
		out.Agent.APIMaxRetries = &n
	}
	if v := c.Memory.MemoryEnabled; v != nil {
		b := *v
		out.Memory.MemoryEnabled = &b
	}
	out.Plugins.Enabled = slices.Clone(c.Plugins.Enabled)
	out.Plugins.Host.Launcher = slices.Clone(c.Plugins.Host.Launcher)
	out.Ignored = slices.Clone(c.Ignored)
	if c.Raw != nil {
		out.Raw = cloneTree(c.Raw).(map[string]any)
	}
	return &out
}

// cloneTree deep-copies a decoded YAML document: its mappings and
// sequences; scalars are values.
func cloneTree(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[k] = cloneTree(x)
		}
		return out
	case map[any]any:
		out := make(map[any]any, len(t))
		for k, x := range t {
			out[k] = cloneTree(x)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = cloneTree(x)
		}
		return out
	}
	return v
}
