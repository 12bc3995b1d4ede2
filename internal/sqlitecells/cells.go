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
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrDecline: the database holds something Read leaves to an SQL engine;
// not a fault of the database.
var ErrDecline = errors.New("left to the SQL engine")

// magic opens every SQLite database file.
const magic = "SQLite format 3\x00"

// errEmpty: the database has no pages (an empty file, and no committed
// frame in its WAL): it holds no rows.
var errEmpty = errors.New("an empty database")

// pager serves a database's pages: the committed frames of its WAL over
// the database file's own.
type pager struct {
	db       []byte
	size     int    // page size
	usable   int    // page size less the reserved bytes at each page's end
	nPages   uint32 // pages in the database, the WAL's last commit's when it has one
	wal      map[uint32][]byte
	maxBytes int64 // no payload is larger: the bytes given
	// work is what is left of the reader's budget: a page fetched costs
	// its size, a payload byte one. A valid database needs about its own
	// size (its pages once, its payloads once); a crafted one whose
	// tables share pages or whose cells share overflow chains would
	// otherwise cost its size many times over.
	work int64
}

// workFactor is the budget, in multiples of the bytes given.
const workFactor = 8

// spend takes n from the budget.
func (p *pager) spend(n int64) error {
	p.work -= n
	if p.work < 0 {
		return fmt.Errorf("more work than %d times the file's size: pages or overflow chains shared", workFactor)
	}
	return nil
}

// newPager reads the header of db and the committed frames of wal (nil:
// none).
func newPager(db, wal []byte) (*pager, error) {
	p := &pager{db: db, maxBytes: int64(len(db) + len(wal))}
	p.work = workFactor*p.maxBytes + 1<<16
	if len(db) > 0 {
		if len(db) < 100 || string(db[:16]) != magic {
			return nil, errors.New("not an SQLite database")
		}
		size := int(binary.BigEndian.Uint16(db[16:18]))
		if size == 1 {
			size = 65536
		}
		p.size = size
		p.usable = size - int(db[20])
		p.nPages = uint32(len(db) / max(size, 1))
		if n := binary.BigEndian.Uint32(db[28:32]); n > 0 && binary.BigEndian.Uint32(db[24:28]) == binary.BigEndian.Uint32(db[92:96]) {
			p.nPages = min(n, p.nPages)
		}
	}
	if err := p.readWAL(wal); err != nil {
		return nil, err
	}
	if p.nPages == 0 {
		return nil, errEmpty
	}
	if !validPageSize(p.size) || p.usable < 480 {
		return nil, fmt.Errorf("page size %d (usable %d) is not SQLite's", p.size, p.usable)
	}
	page1, err := p.page(1)
	if err != nil {
		return nil, err
	}
	if string(page1[:16]) != magic {
		return nil, errors.New("page 1 holds no SQLite header")
	}
	if enc := binary.BigEndian.Uint32(page1[56:60]); enc > 1 {
		return nil, fmt.Errorf("%w: text encoding %d (UTF-16)", ErrDecline, enc)
	}
	return p, nil
}

// readWAL keeps the pages of wal's frames up to its last valid commit:
// frames whose salts are the header's and whose running checksum holds,
// as SQLite's own recovery reads them.
func (p *pager) readWAL(wal []byte) error {
	if len(wal) < 32 {
		return nil // none, or not one frame: the database file alone
	}
	magic := binary.BigEndian.Uint32(wal[0:4])
	if magic != 0x377f0682 && magic != 0x377f0683 {
		return nil // not a WAL SQLite would read
	}
	var order binary.ByteOrder = binary.LittleEndian
	if magic&1 == 1 {
		order = binary.BigEndian
	}
	size := int(binary.BigEndian.Uint32(wal[8:12]))
	if !validPageSize(size) {
		return nil // SQLite's recovery ignores such a WAL, and its frames could not hold a page
	}
	if p.size == 0 {
		p.size, p.usable = size, size // no database file yet: its header is in the WAL's page 1
	}
	if size != p.size {
		return nil
	}
	s0, s1 := walChecksum(order, wal[:24], 0, 0)
	if s0 != binary.BigEndian.Uint32(wal[24:28]) || s1 != binary.BigEndian.Uint32(wal[28:32]) {
		return nil
	}
	pending := map[uint32][]byte{}
	for off := 32; off+24+size <= len(wal); off += 24 + size {
		h := wal[off : off+24]
		if !slices.Equal(h[8:16], wal[16:24]) {
			break
		}
		s0, s1 = walChecksum(order, h[:8], s0, s1)
		s0, s1 = walChecksum(order, wal[off+24:off+24+size], s0, s1)
		if s0 != binary.BigEndian.Uint32(h[16:20]) || s1 != binary.BigEndian.Uint32(h[20:24]) {
			break
		}
		pgno := binary.BigEndian.Uint32(h[0:4])
		if pgno == 0 {
			break
		}
		pending[pgno] = wal[off+24 : off+24+size]
		if commit := binary.BigEndian.Uint32(h[4:8]); commit > 0 {
			if p.wal == nil {
				p.wal = map[uint32][]byte{}
			}
			for n, pg := range pending {
				p.wal[n] = pg
			}
			clear(pending)
			p.nPages = commit
		}
	}
	if pg, ok := p.wal[1]; ok {
		p.usable = p.size - int(pg[20]) // page 1 as the WAL has it
	}
	return nil
}

// validPageSize reports whether n is a page size SQLite writes: a power
// of two from 512 to 65536.
func validPageSize(n int) bool { return n >= 512 && n <= 65536 && n&(n-1) == 0 }

// walChecksum continues the WAL's running checksum (s0, s1) over b, a
// multiple of 8 bytes, read as 32-bit words in order.
func walChecksum(order binary.ByteOrder, b []byte, s0, s1 uint32) (uint32, uint32) {
	for i := 0; i+8 <= len(b); i += 8 {
		s0 += order.Uint32(b[i:]) + s1
		s1 += order.Uint32(b[i+4:]) + s0
	}
	return s0, s1
}

// page is page n (from 1) as the database now holds it.
func (p *pager) page(n uint32) ([]byte, error) {
	if n == 0 || n > p.nPages {
		return nil, fmt.Errorf("page %d is past the database's %d", n, p.nPages)
	}
	if pg, ok := p.wal[n]; ok {
		return pg, nil
	}
	off := int64(n-1) * int64(p.size)
	if off+int64(p.size) > int64(len(p.db)) {
		return nil, fmt.Errorf("page %d is past the database file's end", n)
	}
	return p.db[off : off+int64(p.size)], nil
}

// B-tree page types.
const (
	interiorIndex = 0x02
	interiorTable = 0x05
	leafIndex     = 0x0a
	leafTable     = 0x0d
)

// maxDepth bounds a B-tree's depth: SQLite's own trees stay far below it,
// a crafted file's cycles and chains do not get past it.
const maxDepth = 40

// walk visits, in key order, the payload of every entry of the B-tree at
// root: a table's rows (index false) or a WITHOUT ROWID table's (index
// true, whose interior pages hold entries too).
func (p *pager) walk(root uint32, index bool, visit func(payload []byte) error) error {
	seen := map[uint32]bool{}
	var rec func(n uint32, depth int) error
	rec = func(n uint32, depth int) error {
		if depth > maxDepth || seen[n] {
			return fmt.Errorf("page %d: a cycle or a tree deeper than %d", n, maxDepth)
		}
		seen[n] = true
		pg, err := p.page(n)
		if err != nil {
			return err
		}
		if err := p.spend(int64(len(pg))); err != nil {
			return err
		}
		hdr := 0
		if n == 1 {
			hdr = 100
		}
		if hdr+8 > len(pg) {
			return fmt.Errorf("page %d: too short for a B-tree page", n)
		}
		typ := pg[hdr]
		interior := typ == interiorIndex || typ == interiorTable
		switch {
		case !index && (typ == leafTable || typ == interiorTable):
		case index && (typ == leafIndex || typ == interiorIndex):
		default:
			return fmt.Errorf("page %d: type %#x is not a %s B-tree page", n, typ, map[bool]string{false: "table", true: "index"}[index])
		}
		cells := int(binary.BigEndian.Uint16(pg[hdr+3:]))
		ptrs := hdr + 8
		if interior {
			ptrs = hdr + 12
		}
		if ptrs+2*cells > len(pg) {
			return fmt.Errorf("page %d: %d cells do not fit", n, cells)
		}
		for i := range cells {
			at := int(binary.BigEndian.Uint16(pg[ptrs+2*i:]))
			if at >= p.usable || at < ptrs {
				return fmt.Errorf("page %d: cell %d at %d is off the page", n, i, at)
			}
			cell := pg[at:p.usable]
			if interior {
				if len(cell) < 4 {
					return fmt.Errorf("page %d: cell %d is cut", n, i)
				}
				if err := rec(binary.BigEndian.Uint32(cell), depth+1); err != nil {
					return err
				}
				if !index {
					continue // a table's interior cell holds a rowid only
				}
				cell = cell[4:]
			}
			total, k := uvarint(cell)
			if k == 0 {
				return fmt.Errorf("page %d: cell %d: a bad payload size", n, i)
			}
			cell = cell[k:]
			if !index {
				_, k = uvarint(cell) // the rowid
				if k == 0 {
					return fmt.Errorf("page %d: cell %d: a bad rowid", n, i)
				}
				cell = cell[k:]
			}
			payload, err := p.payload(cell, total, index)
			if err != nil {
				return fmt.Errorf("page %d: cell %d: %w", n, i, err)
			}
			if err := visit(payload); err != nil {
				return err
			}
		}
		if interior {
			return rec(binary.BigEndian.Uint32(pg[hdr+8:]), depth+1)
		}
		return nil
	}
	return rec(root, 0)
}

// payload is a cell's whole payload of total bytes: the part on its page
// (cell), then its overflow pages.
func (p *pager) payload(cell []byte, total uint64, index bool) ([]byte, error) {
	if total > uint64(p.maxBytes) {
		return nil, fmt.Errorf("a payload of %d bytes in a file of %d", total, p.maxBytes)
	}
	if err := p.spend(int64(total)); err != nil {
		return nil, err
	}
	u := int64(p.usable)
	x := u - 35
	if index {
		x = (u-12)*64/255 - 23
	}
	local := int64(total)
	if local > x {
		m := (u-12)*32/255 - 23
		local = m + (int64(total)-m)%(u-4)
		if local > x {
			local = m
		}
	}
	if local > int64(len(cell)) {
		return nil, errors.New("its payload runs off the page")
	}
	out := make([]byte, 0, total)
	out = append(out, cell[:local]...)
	if int64(total) == local {
		return out, nil
	}
	if local+4 > int64(len(cell)) {
		return nil, errors.New("its overflow pointer runs off the page")
	}
	next := binary.BigEndian.Uint32(cell[local:])
	seen := map[uint32]bool{}
	for uint64(len(out)) < total {
		if next == 0 || seen[next] {
			return nil, errors.New("its overflow chain ends early or loops")
		}
		seen[next] = true
		pg, err := p.page(next)
		if err != nil {
			return nil, fmt.Errorf("overflow: %w", err)
		}
		take := min(int64(total)-int64(len(out)), u-4)
		out = append(out, pg[4:4+take]...)
		next = binary.BigEndian.Uint32(pg[0:4])
	}
	return out, nil
}

// uvarint is SQLite's big-endian varint at the start of b and its length
// (0: none).
func uvarint(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < 9 && i < len(b); i++ {
		if i == 8 {
			return v<<8 | uint64(b[i]), 9
		}
		v = v<<7 | uint64(b[i]&0x7f)
		if b[i]&0x80 == 0 {
			return v, i + 1
		}
	}
	return 0, 0
}

// field is one value of a record: its serial type and bytes.
type field struct {
	serial uint64
	data   []byte
}

// record splits a record into its fields.
func record(b []byte) ([]field, error) {
	hlen, k := uvarint(b)
	if k == 0 || hlen > uint64(len(b)) || hlen < uint64(k) {
		return nil, errors.New("a bad record header")
	}
	hdr, body := b[k:hlen], b[hlen:]
	var out []field
	for len(hdr) > 0 {
		st, k := uvarint(hdr)
		if k == 0 {
			return nil, errors.New("a bad serial type")
		}
		hdr = hdr[k:]
		var n uint64
		switch {
		case st <= 4:
			n = st
		case st == 5:
			n = 6
		case st == 6 || st == 7:
			n = 8
		case st == 8 || st == 9:
			n = 0
		case st == 10 || st == 11:
			return nil, errors.New("a reserved serial type")
		default:
			n = (st - 12) / 2
		}
		if n > uint64(len(body)) {
			return nil, errors.New("a value runs past its record")
		}
		out = append(out, field{serial: st, data: body[:n]})
		body = body[n:]
	}
	return out, nil
}

// textOrBlob reports whether f is a text or a blob value.
func (f field) textOrBlob() bool { return f.serial >= 12 }

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

// intField is an integer field's value.
func intField(f field) (int64, bool) {
	switch {
	case f.serial == 8:
		return 0, true
	case f.serial == 9:
		return 1, true
	case f.serial >= 1 && f.serial <= 6:
		var v int64
		for _, c := range f.data {
			v = v<<8 | int64(c)
		}
		if n := len(f.data); n < 8 && f.data[0]&0x80 != 0 {
			v -= 1 << (8 * n) // sign-extend
		}
		return v, true
	}
	return 0, false
}

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
