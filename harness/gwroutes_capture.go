package harness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// CapturePath is a small JSONPath: $ then .name, ["name"] or [index]
// steps ($.data.id, $.data[0].id, $["x-id"]). A route's capture reads a
// value from its JSON answer with one (Route.Capture).
type CapturePath []captureStep

type captureStep struct {
	key   string
	index int // when key is ""
}

// ParseCapturePath parses a capture path; errors wrap ErrCapturePath.
func ParseCapturePath(s string) (CapturePath, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), "$")
	if !ok {
		return nil, fmt.Errorf("%w: %q: want $ first ($.data.id)", ErrCapturePath, s)
	}
	var p CapturePath
	for rest != "" {
		switch {
		case rest[0] == '.':
			rest = rest[1:]
			end := strings.IndexAny(rest, ".[")
			if end < 0 {
				end = len(rest)
			}
			if end == 0 {
				return nil, fmt.Errorf("%w: %q: an empty name after a dot", ErrCapturePath, s)
			}
			p = append(p, captureStep{key: rest[:end]})
			rest = rest[end:]
		case rest[0] == '[':
			end := strings.IndexByte(rest, ']')
			if end < 0 {
				return nil, fmt.Errorf("%w: %q: no ] after [", ErrCapturePath, s)
			}
			in := rest[1:end]
			rest = rest[end+1:]
			if q, err := strconv.Unquote(in); err == nil && len(in) > 1 && (in[0] == '"' || in[0] == '\'') {
				p = append(p, captureStep{key: q})
				continue
			}
			if len(in) > 1 && in[0] == '\'' && in[len(in)-1] == '\'' {
				p = append(p, captureStep{key: in[1 : len(in)-1]})
				continue
			}
			n, err := strconv.Atoi(in)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("%w: %q: [%s]: want an index (0, 1, ...) or a quoted name", ErrCapturePath, s, in)
			}
			p = append(p, captureStep{index: n})
		default:
			return nil, fmt.Errorf("%w: %q: want .name or [index] at %q", ErrCapturePath, s, rest)
		}
	}
	if len(p) == 0 {
		return nil, fmt.Errorf("%w: %q: names no value ($.data.id)", ErrCapturePath, s)
	}
	return p, nil
}

// Find reads the value at p in the JSON document body: a string as it is,
// a number as written, true or false; anything else (an object, a list,
// null, nothing there) is an error.
func (p CapturePath) Find(body []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("the answer is not JSON: %w", err)
	}
	at := "$"
	for _, st := range p {
		switch x := v.(type) {
		case map[string]any:
			if st.key == "" {
				return "", fmt.Errorf("%s is an object, not a list", at)
			}
			next, ok := x[st.key]
			if !ok {
				return "", fmt.Errorf("%s has no %q", at, st.key)
			}
			v, at = next, at+"."+st.key
		case []any:
			if st.key != "" {
				return "", fmt.Errorf("%s is a list, not an object", at)
			}
			if st.index >= len(x) {
				return "", fmt.Errorf("%s has %d item(s), no [%d]", at, len(x), st.index)
			}
			v, at = x[st.index], fmt.Sprintf("%s[%d]", at, st.index)
		default:
			return "", fmt.Errorf("%s is not an object or a list", at)
		}
	}
	switch x := v.(type) {
	case string:
		if x == "" {
			return "", fmt.Errorf("%s is an empty string", at)
		}
		return x, nil
	case json.Number:
		return x.String(), nil
	case bool:
		return strconv.FormatBool(x), nil
	}
	return "", fmt.Errorf("%s is not a string, number or boolean", at)
}
