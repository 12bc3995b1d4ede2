package stores

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tenantcanary/tenantcanary/invariants"
)

// byteaOID is PostgreSQL's bytea type: read in binary, its bytes as
// stored; every other column is read as the server writes it as text
// (json and jsonb as JSON, arrays and composites in their literal form).
const byteaOID = 17

// postgres scans every row of every user table (every schema but the
// system's) of every database of the server that takes connections.
func (r *run) postgres(ctx context.Context) error {
	cfg, err := pgx.ParseConfig(r.store.URL)
	if err != nil {
		return fmt.Errorf("parse the store's URL: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	dbs, err := listStrings(ctx, conn, `SELECT datname FROM pg_database WHERE datallowconn AND NOT datistemplate ORDER BY datname`)
	conn.Close(context.Background())
	if err != nil {
		return fmt.Errorf("list the databases: %w", err)
	}
	// A database that cannot be read (one the URL's user may not connect
	// to) is reported; the others are still scanned.
	var errs []error
	for _, db := range dbs {
		c := cfg.Copy()
		c.Database = db
		if err := r.postgresDB(ctx, c); err != nil {
			errs = append(errs, fmt.Errorf("database %s: %w", db, err))
		}
	}
	return errors.Join(errs...)
}

func listStrings(ctx context.Context, conn *pgx.Conn, sql string, args ...any) ([]string, error) {
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// postgresDB scans one database's user tables.
func (r *run) postgresDB(ctx context.Context, cfg *pgx.ConnConfig) error {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT n.nspname, c.relname, c.oid::int8 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind = 'r' AND n.nspname NOT IN ('pg_catalog', 'information_schema')
		AND n.nspname NOT LIKE 'pg\_toast%' AND n.nspname NOT LIKE 'pg\_temp\_%'
		ORDER BY 1, 2`)
	if err != nil {
		return fmt.Errorf("list the tables: %w", err)
	}
	type table struct {
		schema, name string
		oid          int64
	}
	tables, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (table, error) {
		var t table
		err := row.Scan(&t.schema, &t.name, &t.oid)
		return t, err
	})
	if err != nil {
		return fmt.Errorf("list the tables: %w", err)
	}
	path := "postgres://" + net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))) + "/" + cfg.Database
	// A table that cannot be read (the URL's user may not) is reported;
	// the others are still scanned.
	var errs []error
	for _, t := range tables {
		if err := r.postgresTable(ctx, conn, path, t.schema, t.name, t.oid); err != nil {
			errs = append(errs, fmt.Errorf("table %s.%s: %w", t.schema, t.name, err))
			if ctx.Err() != nil || conn.IsClosed() {
				break
			}
		}
	}
	return errors.Join(errs...)
}

// postgresTable reads one table row by row in a single query, bytea in
// binary and the rest as text, each row named by its primary key (or its
// ctid when it has none), and scans every cell.
func (r *run) postgresTable(ctx context.Context, conn *pgx.Conn, path, schema, table string, oid int64) error {
	pk, err := listStrings(ctx, conn, `SELECT a.attname FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
		WHERE i.indrelid = $1::oid AND i.indisprimary
		ORDER BY array_position(i.indkey::int2[], a.attnum)`, oid)
	if err != nil {
		return fmt.Errorf("its primary key: %w", err)
	}
	name := pgx.Identifier{schema, table}.Sanitize()
	sql := "SELECT ctid::text, * FROM " + name
	pg := conn.PgConn()
	desc, err := pg.Prepare(ctx, "", sql, nil)
	if err != nil {
		return fmt.Errorf("prepare %s: %w", sql, err)
	}
	cols := make([]string, len(desc.Fields))
	formats := make([]int16, len(desc.Fields))
	for i, f := range desc.Fields {
		cols[i] = f.Name
		if f.DataTypeOID == byteaOID {
			formats[i] = pgx.BinaryFormatCode
		}
	}
	keyCols := map[string]int{}
	for i, c := range cols[1:] {
		if _, dup := keyCols[c]; !dup {
			keyCols[c] = i + 1
		}
	}
	rules := tableOwners(r.store.Spec.Owners, r.sc.Tenants, schema, table)
	ownerCols := make([]int, len(rules))
	for i, rule := range rules {
		idx, ok := keyCols[rule.column]
		if !ok {
			r.res.Findings = append(r.res.Findings, invariants.Finding{Invariant: invariants.Harness, Where: invariants.Where{Path: path, Part: schema + "." + table},
				Detail: fmt.Sprintf("the owner column %q of stores[].owners is not a column of %s.%s: its rows are nobody's", rule.column, schema, table)})
			idx = -1
		}
		ownerCols[i] = idx
	}
	rr := pg.ExecPrepared(ctx, "", nil, nil, formats)
	for rr.NextRow() {
		r.res.Rows++
		vals := rr.Values()
		owner, by := "", ""
		for i, rule := range rules {
			if j := ownerCols[i]; j >= 0 && vals[j] != nil {
				if t, ok := rule.owners[string(vals[j])]; ok {
					owner, by = t, rule.column
					break
				}
			}
		}
		what := "a row"
		if owner != "" {
			what = "a row (by " + by + ")"
		}
		for i := 1; i < len(vals); i++ {
			if vals[i] == nil {
				continue
			}
			loc := func() (invariants.Where, string) {
				key := rowKey(pk, keyCols, vals)
				return invariants.Where{Path: path, Part: fmt.Sprintf("%s.%s (%s, %s)", schema, table, cols[i], key)},
					fmt.Sprintf("%s %s.%s (%s)", path, schema, table, cols[i])
			}
			r.value(ctx, vals[i], owner, loc, what)
		}
	}
	if _, err := rr.Close(); err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	return nil
}

// rowKey names a row by its primary key ("id=5", "a=1 b=x") or, with
// none, by its ctid ("ctid (0,1)"), which vals[0] holds.
func rowKey(pk []string, cols map[string]int, vals [][]byte) string {
	if len(pk) == 0 {
		return "ctid " + string(vals[0])
	}
	parts := make([]string, 0, len(pk))
	for _, c := range pk {
		v := "NULL"
		if i, ok := cols[c]; ok && vals[i] != nil {
			v = string(vals[i])
		}
		parts = append(parts, c+"="+v)
	}
	return strings.Join(parts, " ")
}
