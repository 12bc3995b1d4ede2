package scan

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"sync"
	"syscall"
	"time"

	"github.com/tenantcanary/tenantcanary/internal/lru"
)

// FileCache remembers what a Matcher found in each file it scanned, so a
// tree scanned again (after every phase of a scenario) reads only the files
// that changed. An entry holds for one file identity (device, inode, size,
// modification and change times, and those of its -wal for a SQLite
// database) and one matcher's patterns: a file written since, even to the
// same size, has a new change time, which nobody can set back; a new
// canary makes a new matcher. A scan that skipped anything is never kept,
// nor one of a file changed just before it (git's "racy clean" rule: the
// kernel stamps times from a clock that ticks every few milliseconds, so a
// write of the same size in the same tick, after the read, would keep the
// stamp). Safe for concurrent use.
//
// It also keeps what each settled version of a SQLite database read to
// (dbSnapshot), for every matcher that scans through it: the checks
// after a phase scan the same changed database with several matchers.
type FileCache struct {
	mu      sync.Mutex
	entries map[cacheKey]cacheEntry
	scans   int           // files read (not served from the cache), for tests
	settle  time.Duration // a file changed less than this before its scan is not kept
	dbs     *lru.Cache[dbKey, *dbSnapshot]
	dbReads int // database versions read (not served from dbs), for tests
}

// settleTime is far longer than any kernel's timestamp tick (1-10 ms).
const settleTime = 50 * time.Millisecond

// NewFileCache returns an empty cache.
func NewFileCache() *FileCache {
	return &FileCache{entries: map[cacheKey]cacheEntry{}, settle: settleTime, dbs: lru.New[dbKey, *dbSnapshot](snapshotsKept)}
}

type cacheKey struct {
	path     string
	patterns [sha256.Size]byte
}

type cacheEntry struct {
	id   fileID
	hits []Hit
}

type fileID struct {
	file, wal statID
}

type statID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime syscall.Timespec
}

// identify reads path's identity (not following a link) and its -wal's;
// false when path cannot be read.
func identify(path string) (fileID, bool) {
	var id fileID
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return id, false
	}
	id.file = statIDOf(&st)
	if err := syscall.Lstat(path+"-wal", &st); err == nil {
		id.wal = statIDOf(&st)
	}
	return id, true
}

func statIDOf(st *syscall.Stat_t) statID {
	return statID{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// settled reports whether the file (and its -wal) last changed before t.
func (id fileID) settled(t time.Time) bool {
	before := func(s statID) bool { return time.Unix(s.ctime.Unix()).Before(t) && time.Unix(s.mtime.Unix()).Before(t) }
	return before(id.file) && (id.wal == statID{} || before(id.wal))
}

// WithCache returns a Matcher that scans as m does and keeps what Tree and
// File find in c (nil: no cache).
func (m *Matcher) WithCache(c *FileCache) *Matcher {
	cp := *m
	cp.cache = c
	cp.fp = fingerprint(m.patterns)
	return &cp
}

// fingerprint names a set of patterns: entries of a matcher with other
// patterns are other entries.
func fingerprint(patterns []Pattern) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	for _, p := range patterns {
		for _, s := range []string{p.Value, p.Owner, p.Kind} {
			binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
			h.Write(n[:])
			h.Write([]byte(s))
		}
	}
	var fp [sha256.Size]byte
	copy(fp[:], h.Sum(nil))
	return fp
}

// cachedFile is file through m's cache: a file whose identity has not
// changed since it was scanned with these patterns gives its hits again
// without a read.
func (m *Matcher) cachedFile(ctx context.Context, path string, open opener, r *Report) {
	if m.cache == nil {
		m.file(ctx, path, open, r)
		return
	}
	key := cacheKey{path: path, patterns: m.fp}
	began := time.Now()
	id, ok := identify(path) // before the read: a write during it changes the identity
	if ok {
		m.cache.mu.Lock()
		e, hit := m.cache.entries[key]
		m.cache.mu.Unlock()
		if hit && e.id == id {
			r.Hits = append(r.Hits, e.hits...)
			return
		}
	}
	var sub Report
	m.cache.mu.Lock()
	m.cache.scans++
	m.cache.mu.Unlock()
	m.file(ctx, path, open, &sub)
	r.Hits = append(r.Hits, sub.Hits...)
	r.Skipped = append(r.Skipped, sub.Skipped...)
	if ok && len(sub.Skipped) == 0 && ctx.Err() == nil && id.settled(began.Add(-m.cache.settle)) {
		m.cache.mu.Lock()
		m.cache.entries[key] = cacheEntry{id: id, hits: append([]Hit(nil), sub.Hits...)}
		m.cache.mu.Unlock()
	}
}
