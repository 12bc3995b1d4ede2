package profile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// ErrBadEnv marks a .env line that cannot be parsed; the message names the
// file and line.
var ErrBadEnv = errors.New("bad .env line")

// Var is one variable of a .env file.
type Var struct {
	Name  string
	Value string
}

// Env is a parsed .env file: variables in file order, a later definition of
// a name replacing the earlier one.
type Env []Var

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Lookup returns the value of name.
func (e Env) Lookup(name string) (string, bool) {
	for i := len(e) - 1; i >= 0; i-- {
		if e[i].Name == name {
			return e[i].Value, true
		}
	}
	return "", false
}

// Map returns the variables as a map.
func (e Env) Map() map[string]string {
	m := make(map[string]string, len(e))
	for _, v := range e {
		m[v.Name] = v.Value
	}
	return m
}

// LoadEnv parses the profile's .env; a missing file is empty.
// It is read through the home (no link followed).
func (p Profile) LoadEnv() (Env, error) {
	data, err := p.FS().ReadFile(".env")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read .env of profile %q: %w", p.Name, err)
	}
	return ParseEnv(p.File(".env"), data)
}

// ParseEnv parses .env text: blank lines and # comments are skipped; a line
// is NAME=VALUE with an optional "export " prefix; VALUE may be bare (a
// trailing " # comment" is dropped), 'single quoted' (literal) or "double
// quoted" (with \n, \t, \", \\ escapes). Anything else is an error naming
// file and line, and the variable when it has one: never the line's text,
// which may be a secret (or another file's bytes).
func ParseEnv(file string, data []byte) (Env, error) {
	var out Env
	seen := map[string]int{}
	for i, line := range strings.Split(string(data), "\n") {
		name, value, ok, err := parseEnvLine(line)
		if err != nil {
			return nil, fmt.Errorf("%w: %s:%d: %v", ErrBadEnv, file, i+1, err)
		}
		if !ok {
			continue
		}
		if j, dup := seen[name]; dup {
			out[j].Value = value
			continue
		}
		seen[name] = len(out)
		out = append(out, Var{Name: name, Value: value})
	}
	return out, nil
}

func parseEnvLine(line string) (name, value string, ok bool, err error) {
	s := strings.TrimSpace(strings.TrimSuffix(line, "\r"))
	if s == "" || strings.HasPrefix(s, "#") {
		return "", "", false, nil
	}
	if rest, found := strings.CutPrefix(s, "export"); found && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "\t")) {
		s = strings.TrimSpace(rest)
	}
	eq := strings.IndexByte(s, '=')
	if eq < 0 {
		return "", "", false, errors.New("want NAME=VALUE")
	}
	name = strings.TrimSpace(s[:eq])
	if !envNameRE.MatchString(name) {
		return "", "", false, errors.New("bad variable name: want [A-Za-z_][A-Za-z0-9_]*")
	}
	raw := strings.TrimSpace(s[eq+1:])
	switch {
	case strings.HasPrefix(raw, "'"):
		end := strings.IndexByte(raw[1:], '\'')
		if end < 0 {
			return "", "", false, fmt.Errorf("unterminated single quote in value of %s", name)
		}
		value = raw[1 : 1+end]
		if err := trailingComment(raw[2+end:], name); err != nil {
			return "", "", false, err
		}
	case strings.HasPrefix(raw, `"`):
		var b strings.Builder
		i := 1
		closed := false
		for i < len(raw) {
			c := raw[i]
			if c == '\\' && i+1 < len(raw) {
				switch raw[i+1] {
				case 'n':
					b.WriteByte('\n')
				case 't':
					b.WriteByte('\t')
				case 'r':
					b.WriteByte('\r')
				case '"', '\\', '$', '`':
					b.WriteByte(raw[i+1])
				default:
					b.WriteByte('\\')
					b.WriteByte(raw[i+1])
				}
				i += 2
				continue
			}
			if c == '"' {
				closed = true
				i++
				break
			}
			b.WriteByte(c)
			i++
		}
		if !closed {
			return "", "", false, fmt.Errorf("unterminated double quote in value of %s", name)
		}
		value = b.String()
		if err := trailingComment(raw[i:], name); err != nil {
			return "", "", false, err
		}
	default:
		value = raw
		if j := strings.Index(value, " #"); j >= 0 {
			value = strings.TrimSpace(value[:j])
		} else if j := strings.Index(value, "\t#"); j >= 0 {
			value = strings.TrimSpace(value[:j])
		}
	}
	return name, value, true, nil
}

func trailingComment(rest, name string) error {
	rest = strings.TrimSpace(rest)
	if rest == "" || strings.HasPrefix(rest, "#") {
		return nil
	}
	return fmt.Errorf("unexpected text after the quoted value of %s", name)
}

var bareValueRE = regexp.MustCompile(`^[A-Za-z0-9_./:@+,=-]*$`)

// FormatEnvValue renders value for a .env file, double-quoting it unless it
// is plainly safe bare.
func FormatEnvValue(value string) string {
	if bareValueRE.MatchString(value) {
		return value
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`, "\t", `\t`, "$", `\$`, "`", "\\`")
	return `"` + r.Replace(value) + `"`
}

// SetEnv sets name=value in the profile's .env, atomically, keeping every
// other line as it was. The file must parse first: a broken .env is
// reported, never overwritten.
func (p Profile) SetEnv(name, value string) error {
	if !envNameRE.MatchString(name) {
		return fmt.Errorf("set %s in .env of profile %q: bad variable name", name, p.Name)
	}
	home := p.FS()
	data, err := home.ReadFile(".env")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("set %s in profile %q: %w", name, p.Name, err)
	}
	if _, err := ParseEnv(p.File(".env"), data); err != nil {
		return fmt.Errorf("set %s in profile %q: %w", name, p.Name, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(data) == 0 {
		lines = nil
	}
	newLine := name + "=" + FormatEnvValue(value)
	replaced := false
	for i, line := range lines {
		n, _, ok, _ := parseEnvLine(line)
		if ok && n == name {
			if replaced {
				lines[i] = "" // a later duplicate would win over our value
				continue
			}
			lines[i] = newLine
			replaced = true
		}
	}
	if !replaced {
		lines = append(lines, newLine)
	}
	var buf bytes.Buffer
	for _, l := range lines {
		buf.WriteString(l)
		buf.WriteByte('\n')
	}
	if err := home.WriteFileAtomic(".env", buf.Bytes(), 0o600); err != nil {
		return fmt.Errorf("set %s in profile %q: %w", name, p.Name, err)
	}
	return nil
}
