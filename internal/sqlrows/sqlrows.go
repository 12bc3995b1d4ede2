// Package sqlrows reads SQLite tables through database/sql the way the
// checks read them: the tables by name, then each table row by row, every
// column scanned into an any.
package sqlrows

import (
	"context"
	"database/sql"
	"strings"
)

// Tables lists the database's tables, by name.
func Tables(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// Each calls fn for every row of table, numbered from 1, with the table's
// column names and the row's values. vals is reused from row to row; a
// []byte in it is the row's own copy (database/sql copies bytes scanned
// into an any). An error from fn ends the walk and is returned.
func Each(ctx context.Context, db *sql.DB, table string, fn func(row int, cols []string, vals []any) error) error {
	rows, err := db.QueryContext(ctx, `SELECT * FROM "`+strings.ReplaceAll(table, `"`, `""`)+`"`)
	if err != nil {
		return err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return err
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for row := 1; rows.Next(); row++ {
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		if err := fn(row, cols, vals); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Bytes is a text or blob value's bytes, and whether v is one (an empty
// blob may come as a nil []byte).
func Bytes(v any) ([]byte, bool) {
	switch v := v.(type) {
	case []byte:
		return v, true
	case string:
		return []byte(v), true
	}
	return nil, false
}
