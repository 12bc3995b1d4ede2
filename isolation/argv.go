package isolation

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// SplitArgs splits a command line the way a POSIX shell splits words, with
// no expansion: blanks separate words; 'single quotes' keep everything
// literally; "double quotes" keep everything but a backslash before one of
// $ ` " \ or a newline; a backslash outside quotes keeps the next character
// (a backslash-newline is removed). An unterminated quote or a trailing
// backslash is an error naming where.
func SplitArgs(s string) ([]string, error) {
	var out []string
	var word strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if inWord {
				out = append(out, word.String())
				word.Reset()
				inWord = false
			}
		case c == '\\':
			if i+1 >= len(s) {
				return nil, fmt.Errorf("split %q: a trailing backslash escapes nothing", s)
			}
			i++
			if s[i] != '\n' {
				word.WriteByte(s[i])
				inWord = true
			}
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("split %q: the single quote at byte %d is never closed", s, i)
			}
			word.WriteString(s[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case c == '"':
			start := i
			closed := false
			for i++; i < len(s); i++ {
				if s[i] == '"' {
					closed = true
					break
				}
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("$`\"\\\n", s[i+1]) >= 0 {
					i++
					if s[i] != '\n' {
						word.WriteByte(s[i])
					}
					continue
				}
				word.WriteByte(s[i])
			}
			if !closed {
				return nil, fmt.Errorf("split %q: the double quote at byte %d is never closed", s, start)
			}
			inWord = true
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		out = append(out, word.String())
	}
	return out, nil
}

// Argv is a command's argv as a config file gives it: a list of strings,
// or one string split with SplitArgs.
type Argv []string

// UnmarshalYAML reads a string (split with shell quoting rules) or a list
// of scalars.
func (a *Argv) UnmarshalYAML(n *yaml.Node) error {
	v, err := argvOf(n)
	if err != nil {
		return err
	}
	*a = v
	return nil
}

func argvOf(n *yaml.Node) (Argv, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return nil, nil
		}
		v, err := SplitArgs(n.Value)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
		return v, nil
	case yaml.SequenceNode:
		out := make(Argv, 0, len(n.Content))
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: a launcher list holds strings, not a %s", c.Line, kindName(c.Kind))
			}
			out = append(out, c.Value)
		}
		return out, nil
	}
	return nil, fmt.Errorf("line %d: a launcher is a string or a list of strings, not a %s", n.Line, kindName(n.Kind))
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.AliasNode:
		return "alias"
	}
	return "scalar"
}

// ParseArgv reads a launcher value as a decoded config map holds it: a
// string (split with SplitArgs) or a list of strings.
func ParseArgv(v any) ([]string, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case string:
		return SplitArgs(v)
	case []string:
		return append([]string(nil), v...), nil
	case []any:
		out := make([]string, 0, len(v))
		for i, p := range v {
			switch p.(type) {
			case string, int, int64, float64, bool:
				out = append(out, fmt.Sprint(p))
			default:
				return nil, fmt.Errorf("item %d is a %T; want a string", i, p)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("it is a %T; want a string or a list of strings", v)
}
