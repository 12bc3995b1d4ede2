// Package sqlitecells reads every text and blob value of an SQLite
// database from its bytes and its WAL's, with no SQL engine, no copy on
// disk and no connection: the file format's pages, B-trees, overflow
// chains, records and WAL frames (https://www.sqlite.org/fileformat2.html).
// It serves the common case of a scan, a server's state database; what it
// does not read the same way as SQLite itself would (a virtual table, a
// generated column, a row shorter than its table, a schema with comments,
// a UTF-16 database) it declines (ErrDecline), for the caller to read
// through an SQL engine instead. Bytes it cannot read give another error,
// never a panic, and a budget bounds its work by the bytes given.
//
//	cells, err := sqlitecells.Read(db, wal)
//	for _, c := range cells {
//		fmt.Println(c.Where, len(c.Data)) // "messages row 3 content"
//	}
package sqlitecells

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrDecline: the database holds something Read leaves to an SQL engine;
// not a fault of the database.
var ErrDecline = errors.New("left to the SQL engine")

// Cell is one text or blob value of a row.
type Cell struct {
	Where string // "<table> row <n> <column>"
	Data  []byte
}

// Read is every text and blob value of every table of the database whose
// bytes are db and whose WAL's are wal (nil: none): tables in name order,
// rows in key order (as SELECT * gives them), columns in declared order,
// each named "<table> row <n> <column>". ErrDecline (wrapped) says the
// database holds what Read leaves to an SQL engine; another error, that
// the bytes are not a database it can read.
func Read(db, wal []byte) ([]Cell, error) {
	p, err := newPager(db, wal)
	if errors.Is(err, errEmpty) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	type table struct {
		name    string
		root    uint32
		cols    []string // in the table's declared order
		at      []int    // each column's place in a record
		noRowid bool
	}
	var tables []table
	err = p.walk(1, false, func(payload []byte) error {
		fs, err := record(payload)
		if err != nil {
			return fmt.Errorf("the schema: %w", err)
		}
		if len(fs) < 5 || string(fs[0].data) != "table" {
			return nil
		}
		sql := string(fs[4].data)
		if strings.ContainsAny(string(fs[1].data), "()\"'`[]") {
			// The column list is found by its parenthesis: none may come
			// before it, in the table's name.
			return fmt.Errorf("%w: table %q: a quote or a parenthesis in its name", ErrDecline, fs[1].data)
		}
		root, ok := intField(fs[3])
		if !ok || root <= 0 {
			return fmt.Errorf("%w: table %q has no pages of its own (a virtual table)", ErrDecline, fs[1].data)
		}
		cols, rec, noRowid, err := tableColumns(sql)
		if err != nil {
			return fmt.Errorf("%w: table %q: %v", ErrDecline, fs[1].data, err)
		}
		tables = append(tables, table{name: string(fs[1].data), root: uint32(root), cols: cols, at: declaredOrder(cols, rec), noRowid: noRowid})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(tables, func(a, b table) int { return strings.Compare(a.name, b.name) })
	var cells []Cell
	for _, t := range tables {
		row := 0
		err := p.walk(t.root, t.noRowid, func(payload []byte) error {
			row++
			fs, err := record(payload)
			if err != nil {
				return fmt.Errorf("table %q row %d: %w", t.name, row, err)
			}
			if len(fs) != len(t.cols) {
				return fmt.Errorf("%w: table %q row %d has %d values for %d columns", ErrDecline, t.name, row, len(fs), len(t.cols))
			}
			for i, c := range t.cols {
				if f := fs[t.at[i]]; f.textOrBlob() {
					cells = append(cells, Cell{Where: fmt.Sprintf("%s row %d %s", t.name, row, c), Data: append([]byte{}, f.data...)})
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return cells, nil
}
