package profile

import (
	"fmt"
	"path/filepath"
	"strings"
)

// OperatorKey is a config.yaml key only the managed (operator) scope may
// set. A profile's own config.yaml that sets it is ignored for that key,
// wherever the key is read, unless the profile owns its operator keys
// (Profile.OwnOperatorKeys).
type OperatorKey struct {
	// Key is the dotted path. When it names a mapping, every key beneath
	// it is the operator's too (plugins.host: the launcher and every limit,
	// and any key added there later).
	Key string
	// Why a tenant must not set it.
	Why string
}

// OperatorOnly is the one table of the keys only the operator may set.
// Every reader of a profile's own config.yaml (LoadConfig, TerminalSandbox,
// the plugin settings through OwnConfig) reads it through this table, so a
// new operator key is one new row.
var OperatorOnly = []OperatorKey{
	{Key: "plugins.isolation", Why: "in_process would load the profile's plugin code inside the server"},
	{Key: "plugins.host", Why: "the plugin host's launcher runs unsandboxed as agentd's user, and its limits " +
		"(call_timeout, memory_limit, cpu_limit, file_size_limit, open_files_limit, processes_limit) bound every tenant's host"},
	{Key: "terminal.sandbox", Why: "none would run the profile's terminal outside any sandbox"},
	{Key: "terminal.network", Why: "host would give the profile's sandbox the host's network"},
	{Key: "terminal.workdir_roots", Why: "they name the folders outside its home a profile may work in"},
}

// IsOperatorKey reports whether the dotted key is only the operator's: a
// row of OperatorOnly or a key beneath one.
func IsOperatorKey(key string) bool {
	for _, k := range OperatorOnly {
		if key == k.Key || strings.HasPrefix(key, k.Key+".") {
			return true
		}
	}
	return false
}

// IgnoredKey is an operator-only key a profile's own config.yaml set, and
// that was ignored.
type IgnoredKey struct {
	Profile string
	File    string
	Key     string
}

func (k IgnoredKey) String() string {
	return fmt.Sprintf("profile %q: %s sets %s, which only the operator's managed scope may set: ignored", k.Profile, k.File, k.Key)
}

// OwnConfig is the profile's own config.yaml as agentd may use it: with
// every OperatorOnly key removed (and listed in the ignored keys) unless
// the profile owns its operator keys. A missing file is empty.
func (p Profile) OwnConfig() (map[string]any, []IgnoredKey, error) {
	f, err := p.ownConfigBytes()
	if err != nil {
		return nil, nil, err
	}
	return p.ownConfig(f)
}

// ownConfig is OwnConfig from the file's bytes.
func (p Profile) ownConfig(f fileBytes) (map[string]any, []IgnoredKey, error) {
	own, err := f.parse()
	if err != nil {
		return nil, nil, err
	}
	if p.OwnOperatorKeys {
		return own, nil, nil
	}
	var ignored []IgnoredKey
	for _, k := range OperatorOnly {
		var found bool
		if own, found = without(own, strings.Split(k.Key, ".")); found {
			ignored = append(ignored, IgnoredKey{Profile: p.Name, File: f.path, Key: k.Key})
		}
	}
	return own, ignored, nil
}

// ManagedConfig is the managed scope's config.yaml (empty when the profile
// has no managed scope or the file is missing).
func (p Profile) ManagedConfig() (map[string]any, error) {
	f, err := p.managedConfigBytes()
	if err != nil {
		return nil, err
	}
	return f.parse()
}

// managedConfigBytes reads the managed scope's config.yaml; none when the
// profile has no managed scope.
func (p Profile) managedConfigBytes() (fileBytes, error) {
	if p.Managed == "" {
		return fileBytes{}, nil
	}
	return readYAMLBytes(filepath.Join(p.Managed, "config.yaml"))
}

// without returns doc with the key at path removed, copying the mappings
// on the way (doc is not modified), and whether the key was there.
func without(doc map[string]any, path []string) (map[string]any, bool) {
	v, ok := doc[path[0]]
	if !ok {
		return doc, false
	}
	var rest any
	if len(path) > 1 {
		sub, isMap := v.(map[string]any)
		if !isMap {
			return doc, false
		}
		trimmed, found := without(sub, path[1:])
		if !found {
			return doc, false
		}
		rest = trimmed
	}
	out := make(map[string]any, len(doc))
	for k, val := range doc {
		out[k] = val
	}
	if len(path) == 1 {
		delete(out, path[0])
	} else {
		out[path[0]] = rest
	}
	return out, true
}
