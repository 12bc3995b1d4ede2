package scan

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, for row scans

	"github.com/tenantcanary/tenantcanary/internal/sqlitefile"
	"github.com/tenantcanary/tenantcanary/internal/sqlrows"
)

// Hit is a Match located in a file. Its Container is "" for the file's
// own bytes (a SQLite database's raw pages included), "sqlite-row" for a
// value read through SQL (Row then names table, row and column), or the
// layers opened below the file ("gzip", "zip:a.log -> gzip", ...).
type Hit struct {
	Match
	Path string `json:"path"` // the file as named to File or found by Tree
	Row  string `json:"row,omitempty"`
}

// Location renders where the hit is, as path:offset with every container
// layer after a "!" (a SQLite row in brackets): "logs/a.log.gz!gzip:120",
// "backup.zip!zip:a/b.tgz!gzip!tar:c.log:9", "state.db[messages row 3 content]:0".
func (h Hit) Location() string {
	where := h.Path
	if h.Container != "" {
		for _, layer := range strings.Split(h.Container, " -> ") {
			if layer == "sqlite-row" {
				where += "[" + h.Row + "]"
			} else {
				where += "!" + layer
			}
		}
	}
	return fmt.Sprintf("%s:%d", where, h.Start)
}

// Skip is a file (or a part of one) a scan could not read or refused to
// follow: the scan is incomplete there, which a caller must report rather
// than ignore. Err is the cause (errors.Is it with ErrBomb, ErrTooDeep,
// ErrTooLarge).
type Skip struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
	Err    error  `json:"-"`
}

// Report is what a file or tree scan found and what it could not read.
type Report struct {
	Hits    []Hit  `json:"hits"`
	Skipped []Skip `json:"skipped"`
}

func (r *Report) skip(path string, err error) {
	r.Skipped = append(r.Skipped, Skip{Path: path, Reason: err.Error(), Err: err})
}

var (
	sqliteMagic = []byte("SQLite format 3\x00")
)

// errVanished is an opener's answer for a file that a tree walk listed and
// that was removed before it could be opened: there is nothing at rest left
// to scan, which is not a read failure.
var errVanished = errors.New("removed since listed")

// opener opens a file for a scan; tests swap it to make reads fail.
type opener func(path string) (*os.File, error)

// openRegular opens path for reading without following a symlink and
// without blocking on a FIFO, and refuses anything but a regular file.
func openRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("open %s: not a regular file (%s)", path, st.Mode().Type())
	}
	return f, nil
}

// File scans one regular file: its bytes as stored, and what is nested in
// them within m's Limits (a gzip, bzip2, zlib, zip or tar file opened and
// its members scanned, nested containers too; wrapped base64; base64 and
// hex runs decoded and scanned again). A part refused (a decompression
// bomb, a nesting past the bounds) is reported in Skipped, naming the file
// and the member. A SQLite database is copied with its -wal file to a
// private directory first (the live files are only read, never opened as a
// database, and one larger than MaxCopy is not copied: its raw pages are
// scanned in place and the rows not read, which is reported); the copies
// are scanned as raw pages (the WAL's frames, free pages and deleted rows
// included, reported under the live names) and row by row through SQL,
// where a value split over overflow pages is whole.
func (m *Matcher) File(ctx context.Context, path string) Report {
	var r Report
	m.file(ctx, path, openRegular, &r)
	return r
}

// walkerFor returns a walker whose matches and problems go to r under path.
func (m *Matcher) walkerFor(ctx context.Context, path, row string, r *Report) *walker {
	return m.walker(ctx, func(x Match) { r.Hits = append(r.Hits, Hit{Match: x, Path: path, Row: row}) },
		func(where string, err error) { r.skip(path, fmt.Errorf("in %s: %w", where, err)) })
}

func (m *Matcher) file(ctx context.Context, path string, open opener, r *Report) {
	if err := ctx.Err(); err != nil {
		r.skip(path, fmt.Errorf("scan %s: %w", path, err))
		return
	}
	f, err := open(path)
	if errors.Is(err, errVanished) {
		return
	}
	if err != nil {
		r.skip(path, fmt.Errorf("open for scan: %w", err))
		return
	}
	defer f.Close()
	head := make([]byte, sniffLen)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		r.skip(path, fmt.Errorf("rewind %s: %w", path, err))
		return
	}
	if bytes.HasPrefix(head, sqliteMagic) {
		m.sqliteFile(ctx, path, f, open, r)
		return
	}
	w := m.walkerFor(ctx, path, "", r)
	if err := w.stream(f, loc{}); err != nil {
		r.skip(path, fmt.Errorf("read %s: %w", path, err))
	}
	k := sniff(head)
	if k == notContainer {
		return
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		r.skip(path, fmt.Errorf("rewind %s: %w", path, err))
		return
	}
	st, err := f.Stat()
	if err != nil {
		r.skip(path, fmt.Errorf("stat %s: %w", path, err))
		return
	}
	w.open(k, bufio.NewReader(f), f, st.Size(), loc{}, true)
}

func (m *Matcher) raw(ctx context.Context, path string, rd io.Reader, r *Report) {
	if err := m.walkerFor(ctx, path, "", r).stream(rd, loc{}); err != nil {
		r.skip(path, fmt.Errorf("read %s: %w", path, err))
	}
}

// sqliteFile copies the database and its WAL, raw-scans both copies and
// scans every row of every table of the copy. A database or WAL larger
// than MaxCopy (a sparse file claiming gigabytes) is not copied: its raw
// bytes are scanned in place and the rows are not read, which is
// reported.
func (m *Matcher) sqliteFile(ctx context.Context, path string, db *os.File, open opener, r *Report) {
	walPath := path + "-wal"
	wal, err := open(walPath)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			r.skip(walPath, fmt.Errorf("open for scan: %w", err))
		}
		wal = nil
	} else {
		defer wal.Close()
	}
	limit := m.limits.MaxCopy
	for _, f := range []*os.File{db, wal} {
		if f == nil {
			continue
		}
		st, err := f.Stat()
		if err != nil {
			r.skip(f.Name(), fmt.Errorf("stat %s: %w", f.Name(), err))
			return
		}
		if st.Size() > limit {
			err := fmt.Errorf("%s is %d bytes, over the %d-byte bound for a copy to read its rows: %w; its raw bytes were scanned in place, its rows were not read", f.Name(), st.Size(), limit, ErrTooLarge)
			r.skip(path, err)
			m.rawSparse(ctx, path, db, r)
			if wal != nil {
				m.rawSparse(ctx, walPath, wal, r)
			}
			return
		}
	}

	snap, problems := m.cache.snapshot(ctx, path, db, wal, limit)
	r.Skipped = append(r.Skipped, problems...)
	if snap != nil {
		m.scanSnapshot(ctx, path, snap, r)
	}
}

// Linux lseek whences: the next byte of data, the next hole.
const (
	seekData = 3
	seekHole = 4
)

// rawSparse scans f's bytes as stored, skipping the holes of a sparse file
// (they read as zeros, which hold no canary), so a file that claims
// gigabytes costs only what it holds. Where the file system cannot say
// where the holes are, every byte is read.
func (m *Matcher) rawSparse(ctx context.Context, path string, f *os.File, r *Report) {
	st, err := f.Stat()
	if err != nil {
		r.skip(path, fmt.Errorf("stat %s: %w", path, err))
		return
	}
	for off := int64(0); off < st.Size(); {
		data, err := f.Seek(off, seekData)
		if errors.Is(err, syscall.ENXIO) {
			return // only a hole is left
		}
		var hole int64
		if err == nil {
			hole, err = f.Seek(data, seekHole)
		}
		if err != nil {
			if off == 0 {
				if _, err := f.Seek(0, io.SeekStart); err == nil {
					m.raw(ctx, path, f, r)
					return
				}
			}
			r.skip(path, fmt.Errorf("find the data of sparse %s: %w", path, err))
			return
		}
		first := len(r.Hits)
		m.raw(ctx, path, io.NewSectionReader(f, data, hole-data), r)
		for i := first; i < len(r.Hits); i++ {
			if r.Hits[i].Container == "" {
				r.Hits[i].Start += data
				r.Hits[i].End += data
			}
		}
		off = hole
	}
}

// sqliteCells reads every text and blob value of every table of the copy
// at dbCopy (opened read-only), named as a hit on it names its row; the
// problems name path, the database the copy was made of.
func sqliteCells(ctx context.Context, path, dbCopy string) ([]dbCell, []Skip) {
	var problems []Skip
	skip := func(err error) { problems = append(problems, Skip{Path: path, Reason: err.Error(), Err: err}) }
	db, err := sql.Open("sqlite", sqlitefile.URI(dbCopy, "mode=ro"))
	if err != nil {
		skip(fmt.Errorf("open copy of %s as sqlite: %w", path, err))
		return nil, problems
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	tables, err := sqlrows.Tables(ctx, db)
	if err != nil {
		skip(fmt.Errorf("list tables of %s: %w", path, err))
		return nil, problems
	}
	var cells []dbCell
	for _, table := range tables {
		var err error
		if cells, err = tableCells(ctx, db, table, cells); err != nil {
			skip(fmt.Errorf("read table %q of %s: %w", table, path, err))
		}
	}
	return cells, problems
}

// tableCells appends the text and blob values of table to cells.
func tableCells(ctx context.Context, db *sql.DB, table string, cells []dbCell) ([]dbCell, error) {
	err := sqlrows.Each(ctx, db, table, func(row int, cols []string, vals []any) error {
		for i, v := range vals {
			if b, ok := sqlrows.Bytes(v); ok {
				cells = append(cells, dbCell{Where: fmt.Sprintf("%s row %d %s", table, row, cols[i]), Data: b})
			}
		}
		return nil
	})
	return cells, err
}

// ErrNotRegular: a path named to be scanned is neither a regular file nor
// a folder (a named pipe, a device, a socket): reading it might never end.
var ErrNotRegular = errors.New("not a regular file or folder")

// Special names the kind of a file that is neither regular nor a folder.
func Special(mode fs.FileMode) string {
	switch {
	case mode&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case mode&fs.ModeCharDevice != 0:
		return "a character device"
	case mode&fs.ModeDevice != 0:
		return "a block device"
	case mode&fs.ModeSocket != 0:
		return "a socket"
	case mode&fs.ModeSymlink != 0:
		return "a symlink"
	}
	return "a special file (" + mode.Type().String() + ")"
}

// Stream scans what r yields until its end, as File scans a file's bytes
// (a container it starts with opened in place of its bytes), naming the
// hits and problems name; ctx ends the scan between reads (a reader that
// blocks must be unblocked by its owner).
func (m *Matcher) Stream(ctx context.Context, name string, r io.Reader) Report {
	var rep Report
	m.walkerFor(ctx, name, "", &rep).member(r, loc{}, false)
	if err := ctx.Err(); err != nil && len(rep.Skipped) == 0 {
		rep.skip(name, fmt.Errorf("read %s: %w", name, err))
	}
	return rep
}

// Tree scans every regular file under root (root itself may be a file;
// a root that is neither a file nor a folder is reported, ErrNotRegular).
// Symlinks are not followed and other non-regular files hold no bytes to
// scan; a directory or file that cannot be read is reported in Skipped (one
// removed between the listing of its folder and its opening is not: it is
// gone, as a live target's temporary files go). A
// "-wal" file beside a SQLite database is scanned with that database.
func (m *Matcher) Tree(ctx context.Context, root string) Report {
	var r Report
	m.tree(ctx, root, openRegular, &r)
	return r
}

func (m *Matcher) tree(ctx context.Context, root string, open opener, r *Report) {
	if st, err := os.Lstat(root); err == nil && st.Mode()&fs.ModeSymlink != 0 {
		r.skip(root, fmt.Errorf("scan tree %s: the root is a symlink, not followed (name its target)", root))
		return
	} else if err == nil && !st.IsDir() && !st.Mode().IsRegular() {
		r.skip(root, fmt.Errorf("scan tree %s: %w: %s", root, ErrNotRegular, Special(st.Mode())))
		return
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil && path != root && errors.Is(err, fs.ErrNotExist) {
			return nil // removed since its folder was listed: nothing left to scan
		}
		if err != nil {
			r.skip(path, fmt.Errorf("walk: %w", err))
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if strings.HasSuffix(path, "-wal") && isSQLite(strings.TrimSuffix(path, "-wal")) {
			return nil // scanned with its database
		}
		m.cachedFile(ctx, path, func(p string) (*os.File, error) {
			f, err := open(p)
			if p == path && p != root && errors.Is(err, fs.ErrNotExist) {
				return nil, errVanished
			}
			return f, err
		}, r)
		return nil
	})
	if err != nil {
		r.skip(root, fmt.Errorf("scan tree %s: %w", root, err))
	}
}

func isSQLite(path string) bool {
	f, err := openRegular(path)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, len(sqliteMagic))
	_, err = io.ReadFull(f, head)
	return err == nil && bytes.Equal(head, sqliteMagic)
}
