// Package dotpath reads, writes and removes a value at a dotted path
// ("terminal.cwd") in a decoded JSON or YAML document (nested
// map[string]any): the one way the agent's config writes, a dialect's
// result mapping, its event fields and a gateway route's URL field all do
// it.
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

// Get is the value at path in m, and whether there is one.
func Get(m map[string]any, path string) (any, bool) {
	var cur any = m
	for _, part := range strings.Split(path, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = mm[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// Without is a copy of m without the value at path; the mappings on the
// way are copied, the rest shared. m itself is not changed.
func Without(m map[string]any, path string) map[string]any {
	head, rest, nested := strings.Cut(path, ".")
	out := make(map[string]any, len(m))
	for k, v := range m {
		if k != head {
			out[k] = v
			continue
		}
		if !nested {
			continue // the value itself goes
		}
		if mm, ok := v.(map[string]any); ok {
			out[k] = Without(mm, rest)
		} else {
			out[k] = v
		}
	}
	return out
}
