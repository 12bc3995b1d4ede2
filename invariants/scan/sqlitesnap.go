package scan

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
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
type dbCell struct {
	where string // "<table> row <n> <column>"
	data  []byte
}

func (s *dbSnapshot) size() int {
	n := len(s.db) + len(s.wal)
	for _, c := range s.cells {
		n += len(c.where) + len(c.data)
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

// takeSnapshot copies db and wal (nil: none) into a folder of its own,
// holds the copies' bytes and reads the rows of the copy; the problems
// name path and its WAL. A database that cannot be copied gives no
// snapshot; a WAL that cannot be copied whole leaves what was copied of
// it.
func takeSnapshot(ctx context.Context, path string, db, wal *os.File, limit int64) (*dbSnapshot, []Skip) {
	walPath := path + "-wal"
	var problems []Skip
	skip := func(p string, err error) { problems = append(problems, Skip{Path: p, Reason: err.Error(), Err: err}) }
	dir, err := os.MkdirTemp("", "canary-scan-sqlite-*")
	if err != nil {
		skip(path, fmt.Errorf("copy %s for scanning: %w", path, err))
		return nil, problems
	}
	defer os.RemoveAll(dir)
	dbCopy := filepath.Join(dir, "scan.db")
	if err := copyTo(dbCopy, db, limit); err != nil {
		skip(path, fmt.Errorf("copy %s for scanning: %w", path, err))
		return nil, problems
	}
	if wal != nil {
		if err := copyTo(dbCopy+"-wal", wal, limit); err != nil {
			skip(walPath, fmt.Errorf("copy %s for scanning: %w", walPath, err))
		}
	}
	snap := &dbSnapshot{}
	for _, c := range []struct {
		copy, name string
		into       *[]byte
	}{{dbCopy, path, &snap.db}, {dbCopy + "-wal", walPath, &snap.wal}} {
		b, err := os.ReadFile(c.copy)
		if errors.Is(err, fs.ErrNotExist) && c.name == walPath {
			continue
		}
		if err != nil {
			skip(c.name, fmt.Errorf("open copy of %s: %w", c.name, err))
			continue
		}
		if b == nil {
			b = []byte{}
		}
		*c.into = b
	}
	cells, rowProblems := sqliteCells(ctx, path, dbCopy)
	snap.cells = cells
	return snap, append(problems, rowProblems...)
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
		m.walkerFor(ctx, path, c.where, r).bytes(c.data, loc{prefix: "sqlite-row"})
	}
}
