package scan

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/tenantcanary/tenantcanary/internal/lru"
)

// BenchmarkSQLiteFile scans a small state database in WAL mode (a
// session's table and 60 messages, some in the -wal file), as the checks
// scan each tenant's state.db after every phase, through a FileCache:
// "first" reads a version not scanned before (a copy, a connection, its
// rows), "again" one that another matcher read already (only the
// matching).
func BenchmarkSQLiteFile(b *testing.B) {
	pats := testPatterns(rand.New(rand.NewPCG(7, 8)), 3)
	m, err := Compile(pats)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "state.db")
	db := openWAL(b, path)
	for i := range 60 {
		mustExec(b, db, `INSERT INTO messages (content) VALUES (?)`, fmt.Sprintf("turn %d of %s", i, pats[i%len(pats)].Value))
	}
	fc := NewFileCache()
	fc.settle = 0
	cached := m.WithCache(fc)
	for _, again := range []bool{false, true} {
		name := map[bool]string{false: "first", true: "again"}[again]
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				fc.entries = map[cacheKey]cacheEntry{} // the file's hits: the database is scanned
				if !again {
					fc.dbs = lru.New[dbKey, *dbSnapshot](snapshotsKept)
				}
				r := cached.File(context.Background(), path)
				if len(r.Hits) == 0 || len(r.Skipped) != 0 {
					b.Fatalf("hits %d, skipped %v", len(r.Hits), r.Skipped)
				}
			}
		})
	}
}
