package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"

	"modernc.org/sqlite" // the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/tenantcanary/tenantcanary/agentd/homefs"
	"github.com/tenantcanary/tenantcanary/internal/sqlitefile"
)

// ErrUnknownSession is returned for a stored session id not in the database.
var ErrUnknownSession = errors.New("unknown stored session")

// migrations are applied in order; the schema version is the number applied.
// Never edit a shipped migration: append a new one.
var migrations = []string{
	// 1: sessions and messages.
	`CREATE TABLE sessions (
		id TEXT PRIMARY KEY,
		profile TEXT NOT NULL,
		model TEXT NOT NULL,
		title TEXT NOT NULL DEFAULT '',
		source TEXT NOT NULL DEFAULT 'tui',
		created_at TEXT NOT NULL,
		updated_at TEXT NOT NULL
	);
	CREATE TABLE messages (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
		role TEXT NOT NULL,
		content TEXT NOT NULL DEFAULT '',
		tool_calls TEXT NOT NULL DEFAULT '',
		tool_call_id TEXT NOT NULL DEFAULT '',
		name TEXT NOT NULL DEFAULT '',
		created_at TEXT NOT NULL
	);
	CREATE INDEX messages_session ON messages(session_id, id);`,
}

// DB is one profile's state database. Every write goes through one
// connection (w), so this process's writers queue in Go, in order and
// under their context, instead of racing for SQLite's lock; reads use a
// pool of their own (WAL lets them run beside the writer).
type DB struct {
	w    *sql.DB // the one writer connection
	r    *sql.DB // readers (query_only)
	path string
	dir  *os.File // the pinned folder of a database opened by OpenIn
}

// ErrBusy: the database stayed locked (by another process) longer than
// the busy timeout. The caller may retry.
var ErrBusy = errors.New("state database busy: another process holds its write lock; retry later")

// busyTimeout is how long SQLite waits for another process's lock.
const busyTimeout = 10 * time.Second

// Session is a stored session.
type Session struct {
	ID        string
	Profile   string
	Model     string
	Title     string
	Source    string // "tui", "serve", "cron", ...
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Message is one stored message. ToolCalls holds the assistant's tool
// calls as the JSON the provider sent; ToolCallID ties a tool result to its
// call.
type Message struct {
	Role       string
	Content    string
	ToolCalls  string
	ToolCallID string
	Name       string
	CreatedAt  time.Time
}

// Open opens (creating if needed) the database at path in WAL mode and
// brings its schema up to date.
func Open(ctx context.Context, path string) (*DB, error) {
	return open(ctx, path, path, busyTimeout, nil)
}

// OpenIn opens the database name of a home (a profile's state.db) the
// way Open does, refusing a name, name-wal or name-shm that is a symlink
// (homefs.ErrLink, homefs.ErrLinkOut) or not a regular file
// (homefs.ErrNotRegular), before the open and again after it.
//
// SQLite opens by path and cannot be handed a file descriptor, nor told
// SQLITE_OPEN_NOFOLLOW through modernc.org/sqlite (its open flags are
// fixed). So the path given to SQLite is pinned to the home's folder as
// opened through the home: /proc/self/fd/N/<name>. SQLite's unix VFS
// expands the symlinks of a path itself (the magic link N included), so
// this pins the folder as far as SQLite lets it; the checks around the
// open are the defence against a linked file.
func OpenIn(ctx context.Context, home homefs.Home, name string) (*DB, error) {
	label := home.Path(name)
	if home.FollowLinks {
		return open(ctx, label, label, busyTimeout, nil) // the home-follows-links fault: links followed
	}
	if err := checkFiles(home, name); err != nil {
		return nil, err
	}
	dirName, base := path.Split(name)
	if dirName == "" {
		dirName = "."
	}
	dir, err := home.OpenDir(path.Clean(dirName))
	if err != nil {
		return nil, fmt.Errorf("open state db %s: %w", label, err)
	}
	pinned := fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), base)
	if _, err := os.Stat(filepath.Dir(pinned)); err != nil {
		pinned = label // no /proc: the checks around the open still stand
	}
	var pin pinnedFile
	d, err := open(ctx, pinned, label, busyTimeout, func() error { return pin.check(home, name) })
	if err != nil {
		dir.Close()
		return nil, err
	}
	d.dir = dir
	if err := checkFiles(home, name); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// pinnedFile is the database file a DB opened first, by inode: every
// connection opened later (the readers' pool opens them by path, on
// demand) must find that same file there, a regular file and no link, or
// it is refused, so a tenant that swaps its state.db after the scope
// opened it never gets another file (or a FIFO) opened in its place.
type pinnedFile struct {
	mu       sync.Mutex
	dev, ino uint64
}

// check is run before and after each connection's open.
func (p *pinnedFile) check(home homefs.Home, name string) error {
	if err := checkFiles(home, name); err != nil {
		return err
	}
	id, err := home.Stat(name)
	if err != nil {
		return fmt.Errorf("open state db: %w", err)
	}
	if !id.Present() {
		return nil // the first open creates it
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ino == 0 {
		p.dev, p.ino = id.Dev, id.Ino
		return nil
	}
	if id.Dev != p.dev || id.Ino != p.ino {
		return fmt.Errorf("open state db: %s was replaced since the scope opened it: %w", name, ErrReplaced)
	}
	return nil
}

// ErrReplaced marks a state database file replaced by another file after
// the database was first opened.
var ErrReplaced = errors.New("state database replaced")

// checkFiles refuses a database, WAL or shared-memory file that is a link
// or not a regular file.
func checkFiles(home homefs.Home, name string) error {
	for _, n := range []string{name, name + "-wal", name + "-shm"} {
		if _, err := home.CheckFile(n); err != nil {
			return fmt.Errorf("open state db: %w", err)
		}
	}
	return nil
}

// checkedConnector opens connections to one database, each between two
// runs of check (nil: none).
type checkedConnector struct {
	dsn   string
	check func() error
}

func (c checkedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	if c.check != nil {
		if err := c.check(); err != nil {
			return nil, err
		}
	}
	conn, err := sqliteDriver().Open(c.dsn)
	if err != nil {
		return nil, err
	}
	if c.check != nil {
		if err := c.check(); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return conn, nil
}

func (c checkedConnector) Driver() driver.Driver { return sqliteDriver() }

// sqliteDriver is modernc.org/sqlite's driver as registered (with
// whatever functions were registered on it).
var sqliteDriver = sync.OnceValue(func() driver.Driver {
	db, err := sql.Open("sqlite", "")
	if err != nil {
		return noDriver{err}
	}
	defer db.Close()
	return db.Driver()
})

// noDriver is the driver when "sqlite" is not registered (never, with
// the import above): every open fails.
type noDriver struct{ err error }

func (n noDriver) Open(string) (driver.Conn, error) { return nil, n.err }

// readers is how many reader connections a DB keeps open (opened with the
// database, kept for its life): reads rarely open a connection later.
const readers = 2

func dsn(path string, busy time.Duration, pragmas ...string) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	q.Add("_pragma", "foreign_keys(ON)")
	for _, p := range pragmas {
		q.Add("_pragma", p)
	}
	return sqlitefile.URI(path, q.Encode())
}

// open opens the database at path; label names it in messages; check
// (nil: none) runs around every connection's open.
func open(ctx context.Context, path, label string, busy time.Duration, check func() error) (*DB, error) {
	w := sql.OpenDB(checkedConnector{dsn: dsn(path, busy, "journal_mode(WAL)", "synchronous(NORMAL)") + "&_txlock=immediate", check: check})
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	var mode string
	if err := w.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		w.Close()
		return nil, fmt.Errorf("open state db %s: %w", label, busyErr(err))
	}
	if mode != "wal" {
		w.Close()
		return nil, fmt.Errorf("open state db %s: journal mode is %q, want wal", label, mode)
	}
	r := sql.OpenDB(checkedConnector{dsn: dsn(path, busy, "query_only(1)"), check: check})
	r.SetMaxIdleConns(readers)
	r.SetConnMaxLifetime(0)
	r.SetConnMaxIdleTime(0)
	d := &DB{w: w, r: r, path: label}
	if err := d.warmReaders(ctx); err != nil {
		d.Close()
		return nil, fmt.Errorf("open state db %s: %w", label, err)
	}
	if err := d.migrate(ctx); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// warmReaders opens the readers' connections now, beside the writer's,
// so that later reads reuse them instead of opening the file again.
func (d *DB) warmReaders(ctx context.Context) error {
	var conns []*sql.Conn
	defer func() {
		for _, c := range conns {
			c.Close() // back to the pool, idle
		}
	}()
	for range readers {
		c, err := d.r.Conn(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	return nil
}

// busyErr turns SQLite's "database is locked" (SQLITE_BUSY, after the busy
// timeout) into ErrBusy, so that no caller shows SQLite's text.
func busyErr(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY {
		return ErrBusy
	}
	return err
}

// Path is the database file.
func (d *DB) Path() string { return d.path }

// Close closes the database.
func (d *DB) Close() error {
	err := errors.Join(d.w.Close(), d.r.Close())
	if d.dir != nil {
		err = errors.Join(err, d.dir.Close())
	}
	if err != nil {
		return fmt.Errorf("close state db %s: %w", d.path, err)
	}
	return nil
}

// Version is the number of migrations applied.
func (d *DB) Version(ctx context.Context) (int, error) {
	var v int
	err := d.r.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("read schema version of %s: %w", d.path, err)
	}
	return v, nil
}

func (d *DB) migrate(ctx context.Context) error {
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", d.path, busyErr(err))
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)`); err != nil {
		return fmt.Errorf("migrate %s: %w", d.path, busyErr(err))
	}
	var have int
	if err := tx.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Scan(&have); err != nil {
		return fmt.Errorf("migrate %s: %w", d.path, busyErr(err))
	}
	if have > len(migrations) {
		return fmt.Errorf("migrate %s: schema version %d is newer than this agentd knows (%d)", d.path, have, len(migrations))
	}
	for v := have + 1; v <= len(migrations); v++ {
		if _, err := tx.ExecContext(ctx, migrations[v-1]); err != nil {
			return fmt.Errorf("migrate %s to version %d: %w", d.path, v, busyErr(err))
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations(version, applied_at) VALUES (?, ?)", v, now()); err != nil {
			return fmt.Errorf("migrate %s to version %d: %w", d.path, v, busyErr(err))
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate %s: %w", d.path, busyErr(err))
	}
	return nil
}

func now() string { return time.Now().UTC().Format(time.RFC3339Nano) }

func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

// NewID returns a fresh random session id.
func NewID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

// CreateSession stores a new session; an empty ID gets a fresh one.
func (d *DB) CreateSession(ctx context.Context, s Session) (Session, error) {
	if s.ID == "" {
		s.ID = NewID()
	}
	if s.Source == "" {
		s.Source = "tui"
	}
	ts := now()
	_, err := d.w.ExecContext(ctx,
		"INSERT INTO sessions(id, profile, model, title, source, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
		s.ID, s.Profile, s.Model, s.Title, s.Source, ts, ts)
	if err != nil {
		return Session{}, fmt.Errorf("create session in %s: %w", d.path, busyErr(err))
	}
	s.CreatedAt, s.UpdatedAt = parseTime(ts), parseTime(ts)
	return s, nil
}

// Session returns the stored session id.
func (d *DB) Session(ctx context.Context, id string) (Session, error) {
	var s Session
	var c, u string
	err := d.r.QueryRowContext(ctx,
		"SELECT id, profile, model, title, source, created_at, updated_at FROM sessions WHERE id = ?", id).
		Scan(&s.ID, &s.Profile, &s.Model, &s.Title, &s.Source, &c, &u)
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, fmt.Errorf("%w %q in %s", ErrUnknownSession, id, d.path)
	}
	if err != nil {
		return Session{}, fmt.Errorf("read session %q from %s: %w", id, d.path, err)
	}
	s.CreatedAt, s.UpdatedAt = parseTime(c), parseTime(u)
	return s, nil
}

// Sessions lists the stored sessions, newest first.
func (d *DB) Sessions(ctx context.Context) ([]Session, error) {
	rows, err := d.r.QueryContext(ctx,
		"SELECT id, profile, model, title, source, created_at, updated_at FROM sessions ORDER BY created_at DESC, id")
	if err != nil {
		return nil, fmt.Errorf("list sessions in %s: %w", d.path, err)
	}
	defer rows.Close()
	var out []Session
	for rows.Next() {
		var s Session
		var c, u string
		if err := rows.Scan(&s.ID, &s.Profile, &s.Model, &s.Title, &s.Source, &c, &u); err != nil {
			return nil, fmt.Errorf("list sessions in %s: %w", d.path, err)
		}
		s.CreatedAt, s.UpdatedAt = parseTime(c), parseTime(u)
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list sessions in %s: %w", d.path, err)
	}
	return out, nil
}

// SetTitle sets a session's title.
func (d *DB) SetTitle(ctx context.Context, id, title string) error {
	res, err := d.w.ExecContext(ctx, "UPDATE sessions SET title = ?, updated_at = ? WHERE id = ?", title, now(), id)
	if err != nil {
		return fmt.Errorf("set title of session %q in %s: %w", id, d.path, busyErr(err))
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("set title: %w %q in %s", ErrUnknownSession, id, d.path)
	}
	return nil
}

// Append commits one message to a session.
func (d *DB) Append(ctx context.Context, sessionID string, m Message) error {
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("append message to session %q in %s: %w", sessionID, d.path, busyErr(err))
	}
	defer tx.Rollback()
	ts := now()
	res, err := tx.ExecContext(ctx, "UPDATE sessions SET updated_at = ? WHERE id = ?", ts, sessionID)
	if err != nil {
		return fmt.Errorf("append message to session %q in %s: %w", sessionID, d.path, busyErr(err))
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("append message: %w %q in %s", ErrUnknownSession, sessionID, d.path)
	}
	if _, err := tx.ExecContext(ctx,
		"INSERT INTO messages(session_id, role, content, tool_calls, tool_call_id, name, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
		sessionID, m.Role, m.Content, m.ToolCalls, m.ToolCallID, m.Name, ts); err != nil {
		return fmt.Errorf("append message to session %q in %s: %w", sessionID, d.path, busyErr(err))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("append message to session %q in %s: %w", sessionID, d.path, busyErr(err))
	}
	return nil
}

// Messages returns a session's messages in the order they were appended.
func (d *DB) Messages(ctx context.Context, sessionID string) ([]Message, error) {
	rows, err := d.r.QueryContext(ctx,
		"SELECT role, content, tool_calls, tool_call_id, name, created_at FROM messages WHERE session_id = ? ORDER BY id", sessionID)
	if err != nil {
		return nil, fmt.Errorf("read messages of session %q from %s: %w", sessionID, d.path, err)
	}
	defer rows.Close()
	var out []Message
	for rows.Next() {
		var m Message
		var c string
		if err := rows.Scan(&m.Role, &m.Content, &m.ToolCalls, &m.ToolCallID, &m.Name, &c); err != nil {
			return nil, fmt.Errorf("read messages of session %q from %s: %w", sessionID, d.path, err)
		}
		m.CreatedAt = parseTime(c)
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read messages of session %q from %s: %w", sessionID, d.path, err)
	}
	return out, nil
}
