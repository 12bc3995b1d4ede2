// The pager: a database's pages, its WAL's committed frames over the
// file's own, and the walk of a B-tree's entries within a work budget.

package sqlitecells

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

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
