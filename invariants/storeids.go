package invariants

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// StoreRowIDs reads, from a copy of s's database (WAL included), the
// identifier (idColumn) and owner (ownerColumn) of every row of table, in
// row order: for each owner value, its rows' identifiers. The harness
// uses them to probe routes that serve one row ({log_id}) with rows no
// provisioner knew of.
func StoreRowIDs(ctx context.Context, s Store, table, idColumn, ownerColumn string) (map[string][]string, error) {
	db, done, err := openCopy(s, "store-ids-*")
	if err != nil {
		return nil, err
	}
	defer done()
	q := func(n string) string { return `"` + strings.ReplaceAll(n, `"`, `""`) + `"` }
	// SQLite reads a quoted name that is no column as a string: check
	// the columns first.
	probe, err := db.QueryContext(ctx, `SELECT * FROM `+q(table)+` LIMIT 0`)
	if err != nil {
		return nil, fmt.Errorf("read %s of %s: %w", table, s.DB, err)
	}
	cols, err := probe.Columns()
	probe.Close()
	if err != nil {
		return nil, fmt.Errorf("read %s of %s: %w", table, s.DB, err)
	}
	for _, want := range []string{idColumn, ownerColumn} {
		if !slices.Contains(cols, want) {
			return nil, fmt.Errorf("table %s of %s has no column %q (it has %v)", table, s.DB, want, cols)
		}
	}
	rows, err := db.QueryContext(ctx, `SELECT `+q(idColumn)+`, `+q(ownerColumn)+` FROM `+q(table)+` ORDER BY rowid`)
	if err != nil {
		return nil, fmt.Errorf("read %s.%s of %s: %w", table, idColumn, s.DB, err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var id, owner any
		if err := rows.Scan(&id, &owner); err != nil {
			return nil, fmt.Errorf("read %s of %s: %w", table, s.DB, err)
		}
		if o := cellString(owner); o != "" {
			out[o] = append(out[o], cellString(id))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s of %s: %w", table, s.DB, err)
	}
	return out, nil
}
