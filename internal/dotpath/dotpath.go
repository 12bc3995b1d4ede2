// Package dotpath writes a value at a dotted path ("terminal.cwd") in a
// decoded JSON or YAML document (nested map[string]any): the one way the
// agent's config writes, a dialect's result mapping and a gateway route's
// URL field all do it.
package dotpath

import "strings"

// Set sets the value at path in m to v, making the mappings on the way as
// needed: a value on the way that is not a mapping is replaced by one.
func Set(m map[string]any, path string, v any) {
	parts := strings.Split(path, ".")
	for _, part := range parts[:len(parts)-1] {
		next, ok := m[part].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[part] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = v
}
