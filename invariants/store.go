package invariants

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/tenantcanary/tenantcanary/internal/sqlitefile"
	"github.com/tenantcanary/tenantcanary/internal/sqlrows"
	"github.com/tenantcanary/tenantcanary/invariants/scan"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// StorePlace is one column where tenants' secrets may rest, and which
// tenant owns each row: Owners maps a value of OwnerColumn to a tenant.
type StorePlace struct {
	Table, Column, OwnerColumn string
	Owners                     map[string]string
}

// Store is a shared store to check: the database, its data folder, the
// declared places, and a scratch folder for the database's copy.
type Store struct {
	DB      string // the SQLite database
	DataDir string // every other file in it is scanned; "" = the database's folder
	Places  []StorePlace
	Scratch string // where the database is copied to be read; removed after
}

// StoreLeaks reads s's database row by row (a copy, WAL included) and
// every other file of its data folder. Any canary of one tenant in a row
// of a declared table owned by another tenant is a SharedStore finding;
// so is a tenant's secret in an undeclared column, in a row no tenant
// owns, or in another file. own reports, for each tenant, whether one of
// its secrets was seen in a declared place in a row it owns (the positive
// control).
func (c *Checker) StoreLeaks(ctx context.Context, s Store) (out []Finding, own map[string]bool) {
	own = map[string]bool{}
	rows, err := c.storeRows(ctx, s, own)
	out = append(out, rows...)
	if err != nil {
		out = append(out, Finding{Invariant: Harness, Where: Where{Path: s.DB}, Detail: "shared store not read: " + err.Error()})
	}
	out = append(out, c.storeFiles(ctx, s)...)
	return Dedup(out), own
}

// openCopy opens a copy of s's database (its WAL included) in a scratch
// folder, so that reading it neither waits for nor disturbs the target;
// done closes it and removes the copy.
func openCopy(s Store, pattern string) (db *sql.DB, done func(), err error) {
	dir, err := os.MkdirTemp(s.Scratch, pattern)
	if err != nil {
		return nil, nil, fmt.Errorf("copy the database: %w", err)
	}
	dbCopy := filepath.Join(dir, filepath.Base(s.DB))
	if err := copyFile(dbCopy, s.DB); err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	if err := copyFile(dbCopy+"-wal", s.DB+"-wal"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	db, err = sql.Open("sqlite", sqlitefile.URI(dbCopy, ""))
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("open the copy of %s: %w", s.DB, err)
	}
	return db, func() { db.Close(); os.RemoveAll(dir) }, nil
}

func (c *Checker) storeRows(ctx context.Context, s Store, own map[string]bool) ([]Finding, error) {
	db, done, err := openCopy(s, "store-copy-*")
	if err != nil {
		return nil, err
	}
	defer done()
	tables, err := sqlrows.Tables(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("list the tables of %s: %w", s.DB, err)
	}
	var out []Finding
	for _, table := range tables {
		fs, err := c.storeTable(ctx, db, s, table, own)
		out = append(out, fs...)
		if err != nil {
			return out, fmt.Errorf("table %s: %w", table, err)
		}
	}
	return out, nil
}

// storeTable checks every cell of one table.
func (c *Checker) storeTable(ctx context.Context, db *sql.DB, s Store, table string, own map[string]bool) ([]Finding, error) {
	var (
		out []Finding
		// The places of this table: which columns are declared, and the
		// column that names a row's owner (known with the first row).
		declared = map[string]bool{}
		owned    *StorePlace
		ownerCol = -1
	)
	err := sqlrows.Each(ctx, db, table, func(row int, cols []string, vals []any) error {
		if row == 1 {
			for i := range s.Places {
				p := &s.Places[i]
				if p.Table != table {
					continue
				}
				declared[p.Column] = true
				for j, col := range cols {
					if col == p.OwnerColumn && owned == nil {
						owned, ownerCol = p, j
					}
				}
			}
		}
		owner := ""
		if owned != nil {
			owner = owned.Owners[cellString(vals[ownerCol])]
		}
		for i, v := range vals {
			b, ok := sqlrows.Bytes(v)
			if !ok {
				continue
			}
			where := Where{Path: s.DB, Part: fmt.Sprintf("%s row %d %s", table, row, cols[i])}
			c.m.m.Find(b, func(x scan.Match) {
				secret := tenants.Kind(x.Pattern.Kind).Secret()
				f := hitFinding(SharedStore, owner, x, where)
				switch {
				case owner != "" && x.Pattern.Owner != owner:
					f.Detail = fmt.Sprintf("a row %s owns (%s) holds %s's canary", owner, owned.OwnerColumn, x.Pattern.Owner)
					out = append(out, f)
				case !secret:
				case !declared[cols[i]]:
					f.Detail = "a secret outside its declared places (" + table + "." + cols[i] + " is not one)"
					out = append(out, f)
				case owner == "":
					f.Detail = "a secret in a row no tenant owns"
					out = append(out, f)
				default:
					own[owner] = true
				}
			})
		}
		return nil
	})
	return out, err
}

func cellString(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case []byte:
		return string(v)
	}
	return fmt.Sprint(v)
}

// storeFiles scans every file of the data folder but the database's.
func (c *Checker) storeFiles(ctx context.Context, s Store) []Finding {
	dir := s.DataDir
	if dir == "" {
		dir = filepath.Dir(s.DB)
	}
	skip := map[string]bool{}
	for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
		skip[filepath.Clean(s.DB+suffix)] = true
	}
	var paths []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && !skip[filepath.Clean(p)] {
			paths = append(paths, p)
		}
		return nil
	})
	sort.Strings(paths)
	var out []Finding
	for _, p := range paths {
		r := c.m.m.File(ctx, p)
		for _, h := range r.Hits {
			if tenants.Kind(h.Pattern.Kind).Secret() {
				f := hitFinding(SharedStore, "", h.Match, fileWhere(h))
				f.Detail = "a secret in a file of the data folder outside the declared places"
				out = append(out, f)
			}
		}
		for _, sk := range r.Skipped {
			out = append(out, Finding{Invariant: Harness, Where: Where{Path: sk.Path}, Detail: "not scanned: " + sk.Reason})
		}
	}
	return out
}

func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return out.Close()
}
