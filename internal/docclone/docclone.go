// Package docclone deep-copies a decoded JSON or YAML document (nested
// map[string]any and []any, scalars at the leaves), so that a copy handed
// out can be changed without changing what it was copied from.
package docclone

// Map returns a deep copy of m (nil for nil).
func Map(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = Value(v)
	}
	return out
}

// Value returns a deep copy of v: mappings and lists are copied, anything
// else (a string, number, bool, nil, json.Number, time.Time: values that
// cannot be changed in place) is returned as it is.
func Value(v any) any {
	switch x := v.(type) {
	case map[string]any:
		return Map(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = Value(e)
		}
		return out
	default:
		return v
	}
}
