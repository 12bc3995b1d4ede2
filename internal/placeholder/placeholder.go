// Package placeholder is the one template engine of target files and
// attack rows: a {name} in a string (lower-case letters, digits and '_',
// starting with a letter) is filled from a set of variables, and a
// Vocabulary, the names one kind of template may use with what each
// means, validates a template before it is filled.
//
//	argv := placeholder.Strings(target.Serve, map[string]string{"host": "127.0.0.1", "port": "0"})
//	if err := placeholder.Argv.Check(target.Serve); err != nil { ... }
//
// Filling never fails: a name the variables lack stays as written, so a
// template that Check accepted and a caller that forgot a variable show
// the {name} in what they produce rather than an empty string.
package placeholder

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// re is a placeholder: {name}; near is what a mistyped one looks like
// ({Root}, {cron-interval}), which Check reports.
var (
	re   = regexp.MustCompile(`\{([a-z][a-z0-9_]*)\}`)
	near = regexp.MustCompile(`\{[A-Za-z][A-Za-z0-9_-]*\}`)
)

// Names lists the names of s's placeholders, in order, repeats included.
func Names(s string) []string {
	var out []string
	for _, m := range re.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// Sole returns the name of the placeholder that is all of s ("{name}"),
// or "".
func Sole(s string) string {
	if m := re.FindStringSubmatch(s); m != nil && m[0] == s {
		return m[1]
	}
	return ""
}

// String fills every {name} of s that vars has; the others stay.
func String(s string, vars map[string]string) string {
	if !strings.Contains(s, "{") {
		return s
	}
	return re.ReplaceAllStringFunc(s, func(p string) string {
		if v, ok := vars[p[1:len(p)-1]]; ok {
			return v
		}
		return p
	})
}

// Strings is String over each of ss (an argv, say), in a new slice.
func Strings(ss []string, vars map[string]string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = String(s, vars)
	}
	return out
}

// Value fills every string inside v (a string, map[string]any or []any,
// as YAML and JSON decode them, nested). A string that is exactly one
// placeholder becomes that variable itself, of any type; when the
// variable is absent, nil or "", keep is false and a map or list that
// holds the string drops it. Other strings are filled as String does, a
// variable that is not a string written with fmt.Sprint.
func Value(v any, vars map[string]any) (out any, keep bool) {
	switch x := v.(type) {
	case string:
		if name := Sole(x); name != "" {
			got, ok := vars[name]
			if !ok || got == nil || got == "" {
				return nil, false
			}
			return got, true
		}
		return re.ReplaceAllStringFunc(x, func(p string) string {
			if got, ok := vars[p[1:len(p)-1]]; ok {
				return fmt.Sprint(got)
			}
			return p
		}), true
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			if f, ok := Value(e, vars); ok {
				m[k] = f
			}
		}
		return m, true
	case []any:
		l := make([]any, 0, len(x))
		for _, e := range x {
			if f, ok := Value(e, vars); ok {
				l = append(l, f)
			}
		}
		return l, true
	}
	return v, true
}

// Var is one name of a Vocabulary and what it stands for.
type Var struct {
	Name string
	Doc  string
}

// Vocabulary is the names one kind of template may use.
type Vocabulary struct {
	// Of says which templates use it ("a command line of the target file").
	Of   string
	Vars []Var
	// Suffix, when set, also admits every name ending in it ("_id": a
	// route's {session_id}).
	Suffix string
}

// Has reports whether name is one of v's.
func (v Vocabulary) Has(name string) bool {
	if v.Suffix != "" && strings.HasSuffix(name, v.Suffix) && len(name) > len(v.Suffix) {
		return true
	}
	for _, x := range v.Vars {
		if x.Name == name {
			return true
		}
	}
	return false
}

// With is v admitting extra names too (a chain's saved values, say).
func (v Vocabulary) With(extra ...string) Vocabulary {
	out := v
	out.Vars = append([]Var(nil), v.Vars...)
	for _, n := range extra {
		out.Vars = append(out.Vars, Var{Name: n})
	}
	return out
}

// Names lists v's names, in order.
func (v Vocabulary) Names() []string {
	out := make([]string, 0, len(v.Vars))
	for _, x := range v.Vars {
		out = append(out, x.Name)
	}
	return out
}

// Check reports every placeholder in the strings inside t (a string,
// []string, map[string]any or []any, nested) that v lacks, and every
// {word} that is almost one ({Root}), naming the names v has.
func (v Vocabulary) Check(t any) error {
	seen := map[string]bool{}
	var bad []string
	WalkStrings(t, func(s string) {
		for _, p := range near.FindAllString(s, -1) {
			if n := p[1 : len(p)-1]; !seen[n] && (Sole(p) == "" || !v.Has(n)) {
				seen[n] = true
				bad = append(bad, p)
			}
		}
	})
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	known := "{" + strings.Join(v.Names(), "} {") + "}"
	if len(v.Vars) == 0 {
		known = ""
	}
	if v.Suffix != "" {
		known = strings.TrimSpace(known + " {<name>" + v.Suffix + "}")
	}
	return fmt.Errorf("unknown placeholder(s) %s in %s (known: %s)", strings.Join(bad, " "), v.Of, known)
}

// WalkStrings calls fn with every string in v: a string, or one in a map
// or list, nested (as JSON or YAML decode them, and string maps and
// lists).
func WalkStrings(v any, fn func(string)) {
	switch x := v.(type) {
	case string:
		fn(x)
	case []string:
		for _, s := range x {
			fn(s)
		}
	case map[string]any:
		for _, e := range x {
			WalkStrings(e, fn)
		}
	case []any:
		for _, e := range x {
			WalkStrings(e, fn)
		}
	case map[string]string:
		for _, s := range x {
			fn(s)
		}
	}
}
