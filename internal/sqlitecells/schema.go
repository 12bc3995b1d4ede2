// Schemas: the columns a CREATE TABLE statement declares, in the order
// its records hold them.

package sqlitecells

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// tableColumns is the column names of a CREATE TABLE statement, in the
// order it declares them and in the order its records hold them (the
// same but for a WITHOUT ROWID table), and whether it is WITHOUT ROWID;
// an error for what Read leaves to the SQL engine (a generated
// column, a statement it cannot split).
func tableColumns(sql string) (cols, rec []string, noRowid bool, err error) {
	if strings.Contains(sql, "--") || strings.Contains(sql, "/*") {
		return nil, nil, false, errors.New("a comment in its statement")
	}
	open := strings.IndexByte(sql, '(')
	if open < 0 {
		return nil, nil, false, errors.New("no column list (CREATE TABLE ... AS SELECT)")
	}
	var items []string
	depth, start := 0, open+1
	end := -1
	for i := open; i < len(sql) && end < 0; i++ {
		switch c := sql[i]; c {
		case '\'', '"', '`', '[':
			j, ok := quoteEnd(sql, i)
			if !ok {
				return nil, nil, false, errors.New("an unclosed quote")
			}
			i = j
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				items = append(items, sql[start:i])
				end = i
			}
		case ',':
			if depth == 1 {
				items = append(items, sql[start:i])
				start = i + 1
			}
		}
	}
	if end < 0 {
		return nil, nil, false, errors.New("an unclosed column list")
	}
	tail := strings.Fields(strings.ToUpper(sql[end+1:]))
	for i := 0; i+1 < len(tail); i++ {
		if strings.Trim(tail[i], ",") == "WITHOUT" && strings.Trim(tail[i+1], ",;") == "ROWID" {
			noRowid = true
		}
	}
	var pk []string
	for _, it := range items {
		it = strings.TrimSpace(it)
		bare := strings.ToUpper(unquoted(it)) // keywords only: no name, no string
		if it == "" {
			return nil, nil, false, errors.New("an empty item in its column list")
		}
		word := "" // for a quoted name alone
		if f := strings.Fields(bare); len(f) > 0 {
			word = f[0]
		}
		switch word {
		case "CONSTRAINT", "PRIMARY", "UNIQUE", "CHECK", "FOREIGN":
			if i := strings.Index(bare, "PRIMARY KEY"); i >= 0 {
				names, kerr := keyColumns(it)
				if kerr != nil {
					return nil, nil, false, kerr
				}
				pk = names
			}
			continue
		}
		if strings.Contains(bare, "GENERATED") || strings.Contains(bare, " AS ") || strings.Contains(bare, " AS(") {
			return nil, nil, false, errors.New("a generated column")
		}
		name, nerr := columnName(it)
		if nerr != nil {
			return nil, nil, false, nerr
		}
		cols = append(cols, name)
		if strings.Contains(bare, "PRIMARY KEY") {
			pk = []string{name}
		}
	}
	if len(cols) == 0 {
		return nil, nil, false, errors.New("no columns")
	}
	if !noRowid {
		return cols, cols, false, nil
	}
	// A WITHOUT ROWID table's records hold its key's columns first, in
	// the key's order, then the others in the table's.
	var order []string
	for _, k := range pk {
		i := slices.IndexFunc(cols, func(c string) bool { return strings.EqualFold(c, k) })
		if i < 0 {
			return nil, nil, false, fmt.Errorf("its key names %q, no column of it", k)
		}
		if !slices.Contains(order, cols[i]) {
			order = append(order, cols[i])
		}
	}
	if len(order) == 0 {
		return nil, nil, false, errors.New("a WITHOUT ROWID table with no key found")
	}
	for _, c := range cols {
		if !slices.Contains(order, c) {
			order = append(order, c)
		}
	}
	return cols, order, true, nil
}

// declaredOrder is, for each column of a table in its declared order
// (cols), its place in rec, the order its records hold them in.
func declaredOrder(cols, rec []string) []int {
	at := make([]int, len(cols))
	for i, c := range cols {
		at[i] = slices.Index(rec, c)
	}
	return at
}

// quoteEnd is the index of the quote that closes the one at s[i] (' " `
// or [), and whether there is one. A quote doubled inside a quoted part
// reads as two quoted parts side by side, which cut the same.
func quoteEnd(s string, i int) (int, bool) {
	closer := s[i]
	if closer == '[' {
		closer = ']'
	}
	j := strings.IndexByte(s[i+1:], closer)
	return i + 1 + j, j >= 0
}

// unquoted is s with every quoted part (a name, a string) cut out.
func unquoted(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\'', '"', '`', '[':
			j, ok := quoteEnd(s, i)
			if !ok {
				return b.String()
			}
			i = j
			b.WriteByte(' ')
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// keyColumns is the column names of a PRIMARY KEY (...) table constraint,
// each without its COLLATE or ASC/DESC.
func keyColumns(constraint string) ([]string, error) {
	open := strings.IndexByte(constraint, '(')
	end := strings.LastIndexByte(constraint, ')')
	if open < 0 || end < open {
		return nil, errors.New("a PRIMARY KEY with no column list")
	}
	var out []string
	for _, part := range strings.Split(constraint[open+1:end], ",") {
		name, err := columnName(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		out = append(out, name)
	}
	return out, nil
}

// columnName is the name that starts a column definition, unquoted.
func columnName(def string) (string, error) {
	if def == "" {
		return "", errors.New("an empty column definition")
	}
	switch q := def[0]; q {
	case '"', '`', '\'', '[':
		close := q
		if q == '[' {
			close = ']'
		}
		var b strings.Builder
		for i := 1; i < len(def); i++ {
			if def[i] == close {
				if close != ']' && i+1 < len(def) && def[i+1] == close {
					b.WriteByte(close) // a doubled quote
					i++
					continue
				}
				return b.String(), nil
			}
			b.WriteByte(def[i])
		}
		return "", errors.New("an unclosed quoted name")
	}
	if i := strings.IndexAny(def, " \t\r\n"); i >= 0 {
		return def[:i], nil
	}
	return def, nil
}
