package scan

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/tenantcanary/tenantcanary/internal/sqlitecells"
)

// dbSnapshot is what one version of a SQLite database gives every matcher
// that scans it: the bytes of the database and of its WAL as copied, and
// the text and blob values of its rows. Reading the rows (a copy, a
// connection, the schema parsed) costs far more than matching them, and
// the checks after a phase scan the same changed database with several
// matchers (the tenants' canaries, the operator's secrets, the owners a
// control looks for), so each version is read once.
type dbSnapshot struct {
	db, wal []byte // wal is nil when the database had none
	cells   []dbCell
}

// dbCell is one text or blob value of a row.
type dbCell = sqlitecells.Cell

func (s *dbSnapshot) size() int {
	n := len(s.db) + len(s.wal)
	for _, c := range s.cells {
		n += len(c.Where) + len(c.Data)
	}
	return n
}

// dbKey names a version of a database: its path and the identity of its
// file and WAL, read from the open files before they were copied.
type dbKey struct {
	path string
	id   fileID
}

// A FileCache keeps snapshots only of versions that had settled before
// they were read (its settle rule: a write in the same timestamp tick
// would not change the identity), and only small ones: a state database
// of a few sessions is tens of KiB, and 64 of them a few MiB.
const (
	snapshotsKept     = 64
	snapshotKeptBytes = 4 << 20
)

// snapshot is the snapshot of db (and wal, nil: none) at path: the one c
// keeps for this version, or a new one, kept when it may be. Without a
// cache (nil c) every call reads the database.
func (c *FileCache) snapshot(ctx context.Context, path string, db, wal *os.File, limit int64) (*dbSnapshot, []Skip) {
	if c == nil {
		return takeSnapshot(ctx, path, db, wal, limit)
	}
	began := time.Now()
	id, known := identifyOpen(db, wal)
	key := dbKey{path: path, id: id}
	if known {
		if snap, ok := c.dbs.Get(key); ok {
			return snap, nil
		}
	}
	c.mu.Lock()
	c.dbReads++
	c.mu.Unlock()
	snap, problems := takeSnapshot(ctx, path, db, wal, limit)
	if snap != nil && known && len(problems) == 0 && ctx.Err() == nil && snap.size() <= snapshotKeptBytes && id.settled(began.Add(-c.settle)) {
		c.dbs.Put(key, snap)
	}
	return snap, problems
}

// identifyOpen is the identity of the open database and WAL (nil: none);
// false when either cannot be read.
func identifyOpen(db, wal *os.File) (fileID, bool) {
	var id fileID
	of := func(f *os.File, into *statID) bool {
		fi, err := f.Stat()
		if err != nil {
			return false
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if ok {
			*into = statIDOf(st)
		}
		return ok
	}
	if !of(db, &id.file) {
		return id, false
	}
	if wal != nil && !of(wal, &id.wal) {
		return id, false
	}
	return id, true
}

// takeSnapshot reads db and wal (nil: none) into memory, bounded by
// limit, and reads the rows of those bytes: through the file format
// (package sqlitecells), or, for what that leaves to the SQL engine or cannot read,
// through modernc.org/sqlite over a copy in a folder of its own. The
// problems name path and its WAL. A database that cannot be read gives
// no snapshot; a WAL that cannot be read whole leaves what was read of it.
//
// The files are read as they are, with no lock of SQLite's, and a server
// may be writing them. A checkpoint that writes the database while it is
// read tears nothing: the WAL, read after it, holds every page it wrote.
// A restart of the WAL does (a database of one moment, a WAL of a later
// one: rows that never were, or bytes that read as malformed), and it
// changes the WAL's header (its checkpoint sequence and salts); without
// a WAL every commit changes the database's (its change counter). So a
// read whose header changed under it is read again, and so are bytes the
// reader refuses as malformed, until two reads agree; after tornReads
// reads the last bytes are what the scan has.
func takeSnapshot(ctx context.Context, path string, db, wal *os.File, limit int64) (*dbSnapshot, []Skip) {
	var prev *dbSnapshot
	for reads := 1; ; reads++ {
		snap, held, problems := readSnapshot(path, db, wal, limit)
		if snap == nil {
			return nil, problems
		}
		last := reads == tornReads || ctx.Err() != nil
		if !held && !last {
			continue // torn: written while read
		}
		cells, err := sqlitecells.Read(snap.db, snap.wal)
		if err == nil {
			snap.cells = cells
			return snap, problems
		}
		if last || errors.Is(err, sqlitecells.ErrDecline) || (prev != nil && prev.sameBytes(snap)) {
			cells, engineProblems := engineCells(ctx, path, snap.db, snap.wal)
			snap.cells = cells
			return snap, append(problems, engineProblems...)
		}
		prev = snap // malformed, or torn unseen: a second read tells
	}
}

// tornReads is how many times takeSnapshot reads a database that changes
// under it before it scans the last bytes read (a variable for tests).
var tornReads = 10

// sameBytes reports whether o read the same bytes as s.
func (s *dbSnapshot) sameBytes(o *dbSnapshot) bool {
	return bytes.Equal(s.db, o.db) && bytes.Equal(s.wal, o.wal) && (s.wal == nil) == (o.wal == nil)
}

// The headers a write that could tear a read changes: the WAL's first 32
// bytes (its checkpoint sequence and salts, new at every restart), or,
// with no WAL, the database's first 100 (its change counter).
const (
	walHeaderLen = 32
	dbHeaderLen  = 100
)

// readSnapshot reads db and wal (nil: none) whole, bounded by limit (nil
// when db cannot be read), and reports whether the header that guards
// them held from before the read to after it.
func readSnapshot(path string, db, wal *os.File, limit int64) (*dbSnapshot, bool, []Skip) {
	var problems []Skip
	skip := func(p string, err error) { problems = append(problems, Skip{Path: p, Reason: err.Error(), Err: err}) }
	guard, n := db, dbHeaderLen
	if wal != nil {
		guard, n = wal, walHeaderLen
	}
	before := header(guard, n)
	snap := &dbSnapshot{}
	var err error
	if snap.db, err = readBound(db, limit); err != nil {
		skip(path, fmt.Errorf("read %s for scanning: %w", path, err))
		return nil, false, problems
	}
	read := snap.db
	if testHookBetweenReads != nil {
		testHookBetweenReads()
	}
	if wal != nil {
		walPath := path + "-wal"
		if snap.wal, err = readBound(wal, limit); err != nil {
			skip(walPath, fmt.Errorf("read %s for scanning: %w", walPath, err))
		}
		read = snap.wal
	}
	after := header(guard, n)
	held := bytes.Equal(before, after) && bytes.Equal(after, read[:min(n, len(read))])
	return snap, held, problems
}

// testHookBetweenReads, when set, runs between the read of a database
// and the read of its WAL: a test tears a read there.
var testHookBetweenReads func()

// header is f's first n bytes (fewer at its end; none when unread).
func header(f *os.File, n int) []byte {
	b := make([]byte, n)
	got, _ := f.ReadAt(b, 0)
	return b[:got]
}

// readBound reads f from its start, at most limit bytes: past it, the
// first limit bytes and an error (a file that grew since it was
// measured). The buffer is sized from the file's size at once.
func readBound(f *os.File, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	if st, err := f.Stat(); err == nil {
		buf.Grow(int(min(st.Size(), limit)) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(io.NewSectionReader(f, 0, limit+1))
	b := buf.Bytes()
	if err == nil && int64(len(b)) > limit {
		return b[:limit], fmt.Errorf("it grew past the %d-byte bound while read: %w", limit, ErrTooLarge)
	}
	if b == nil {
		b = []byte{}
	}
	return b, err
}

// engineCells is sqliteCells over a copy of db and wal (nil: none) in a
// folder of its own, removed after.
func engineCells(ctx context.Context, path string, db, wal []byte) ([]dbCell, []Skip) {
	fail := func(err error) ([]dbCell, []Skip) {
		return nil, []Skip{{Path: path, Reason: err.Error(), Err: err}}
	}
	dir, err := os.MkdirTemp("", "canary-scan-sqlite-*")
	if err != nil {
		return fail(fmt.Errorf("copy %s for scanning: %w", path, err))
	}
	defer os.RemoveAll(dir)
	dbCopy := filepath.Join(dir, "scan.db")
	if err := os.WriteFile(dbCopy, db, 0o600); err != nil {
		return fail(fmt.Errorf("copy %s for scanning: %w", path, err))
	}
	if wal != nil {
		if err := os.WriteFile(dbCopy+"-wal", wal, 0o600); err != nil {
			return fail(fmt.Errorf("copy %s-wal for scanning: %w", path, err))
		}
	}
	return sqliteCells(ctx, path, dbCopy)
}

// scanSnapshot raw-scans the snapshot's database and WAL bytes, as path
// and its WAL, and scans every value of its rows.
func (m *Matcher) scanSnapshot(ctx context.Context, path string, s *dbSnapshot, r *Report) {
	if s.db != nil {
		m.raw(ctx, path, bytes.NewReader(s.db), r)
	}
	if s.wal != nil {
		m.raw(ctx, path+"-wal", bytes.NewReader(s.wal), r)
	}
	for _, c := range s.cells {
		m.walkerFor(ctx, path, c.Where, r).bytes(c.Data, loc{prefix: "sqlite-row"})
	}
}
