// Package dotpath reads, writes and removes a value at a dotted path
// ("terminal.cwd") in a decoded JSON or YAML document (nested
// map[string]any): the one way the agent's config writes, a dialect's
// result mapping, its event fields and a gateway route's URL field all do
// it.
package dotpath

import (
	"fmt"
	"strings"
)

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

// SetAll sets the value at path in m, where a segment "name[]" stands for
// every element of the array at name ("messages[].content[].url"), and
// returns how many places it set. Unlike Set it replaces nothing in the
// way: an array where the path says a mapping, a scalar where it says
// either, or a missing array is an error naming where (a path written for
// another shape of document would otherwise be silently wrong); a missing
// mapping is made.
func SetAll(m map[string]any, path string, v any) (int, error) {
	return setAll(m, strings.Split(path, "."), v, "", true)
}

// setAll sets u at the path segs in m: a segment "name" is a mapping
// (made when missing), "name[]" every element of the array there (which
// must exist). It returns how many places it set. A value in the way that
// is not what the path says (an array for a plain segment, a scalar for
// a mapping) is an error naming where, never replaced: a path written
// for another shape of body would otherwise be silently wrong. create
// says whether a missing mapping (or last key) is made: at the top, yes;
// inside an array's element, no.
func setAll(m map[string]any, segs []string, u any, at string, create bool) (int, error) {
	seg := segs[0]
	name, each := strings.CutSuffix(seg, "[]")
	where := strings.TrimPrefix(at+"."+name, ".")
	if name == "" {
		return 0, fmt.Errorf("an empty segment at %q", at)
	}
	v, exists := m[name]
	if each {
		arr, ok := v.([]any)
		if (!exists || !ok) && !create {
			return 0, nil // an element of another shape: left alone
		}
		if !exists || !ok {
			return 0, fmt.Errorf("%s is not an array in the document (%T): %s[] indexes one", where, v, name)
		}
		n := 0
		for i, el := range arr {
			elAt := fmt.Sprintf("%s[%d]", where, i)
			if len(segs) == 1 {
				arr[i] = u
				n++
				continue
			}
			em, ok := el.(map[string]any)
			if !ok {
				continue // an element of another kind (a text part beside an image part)
			}
			// Below an array, an element that lacks the path is another
			// kind of element (a text part beside an image part): left
			// alone, nothing made in it.
			k, err := setAll(em, segs[1:], u, elAt, false)
			if err != nil {
				return n, err
			}
			n += k
		}
		return n, nil
	}
	if len(segs) == 1 {
		if _, isArr := v.([]any); isArr {
			return 0, fmt.Errorf("%s is an array in the document: index it as %s[]", where, name)
		}
		if !exists && !create {
			return 0, nil
		}
		m[name] = u
		return 1, nil
	}
	switch next := v.(type) {
	case map[string]any:
		return setAll(next, segs[1:], u, where, create)
	case nil:
		if exists {
			return 0, fmt.Errorf("%s is null in the document", where)
		}
		if !create {
			return 0, nil
		}
		made := map[string]any{}
		m[name] = made
		return setAll(made, segs[1:], u, where, create)
	case []any:
		return 0, fmt.Errorf("%s is an array in the document: index it as %s[]", where, name)
	default:
		return 0, fmt.Errorf("%s is a %T in the document, not a mapping", where, v)
	}
}
