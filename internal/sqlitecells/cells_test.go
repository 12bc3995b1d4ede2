package sqlitecells

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The seeds in testdata were written by modernc.org/sqlite (page size
// 512): small.db, two tables (t, and w WITHOUT ROWID) of 13 and 12 rows,
// one value 1,505 bytes long (an overflow chain); wal.db and its
// wal.db-wal, the same rows committed in the WAL only. The engine's own
// reading of the same cases is held against Read in package scan
// (TestPageCellsAsTheEngineReadsThem), which links the engine.

func seed(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return b
}

// TestReadSeeds: every row of both seeds, named by table, row and column,
// from the database file alone and from a WAL over a file that has only
// the schema.
func TestReadSeeds(t *testing.T) {
	t.Parallel()
	for name, files := range map[string][2][]byte{
		"file": {seed(t, "small.db"), nil},
		"wal":  {seed(t, "wal.db"), seed(t, "wal.db-wal")},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cells, err := Read(files[0], files[1])
			require.NoError(t, err)
			got := map[string]string{}
			for _, c := range cells {
				got[c.Where] = string(c.Data)
			}
			require.Len(t, got, 13+12+12+12, "t's a and b (the last b NULL), w's k and v")
			require.Equal(t, "text-00-", got["t row 1 a"])
			require.Equal(t, "blob-11", got["t row 12 b"])
			require.Equal(t, "long-"+strings.Repeat("o", 1500), got["t row 13 a"], "the overflow chain, whole")
			require.Equal(t, "key-00-", got["w row 1 k"])
			require.Equal(t, "value-11", got["w row 12 v"])
		})
	}
	// Without its WAL, wal.db holds the schema and no row.
	cells, err := Read(seed(t, "wal.db"), nil)
	require.NoError(t, err)
	require.Empty(t, cells)
}

// TestReadRefusesWhatIsNoDatabase: bytes that are no database, a
// database cut short, and pages that point at themselves give an error,
// never cells nor a panic; an empty file is an empty database.
func TestReadRefusesWhatIsNoDatabase(t *testing.T) {
	t.Parallel()
	good := seed(t, "small.db")
	_, err := Read(good, nil)
	require.NoError(t, err, "the positive control")

	cells, err := Read(nil, nil)
	require.NoError(t, err, "an empty file is an empty database")
	require.Empty(t, cells)
	_, err = Read([]byte("not a database at all, not one bit of it, though long enough to have a header: 100 bytes and more"), nil)
	require.Error(t, err)
	_, err = Read(good[:len(good)-512], nil)
	require.Error(t, err, "a database cut short")
	// Every 4-byte word of page 2 onwards pointing at page 2: children and
	// overflow chains that loop.
	loop := append([]byte(nil), good...)
	for i := 512; i+4 <= len(loop); i += 4 {
		loop[i], loop[i+1], loop[i+2], loop[i+3] = 0, 0, 0, 2
	}
	_, err = Read(loop, nil)
	require.Error(t, err)
	// A WAL whose frames' checksums do not hold is no WAL: the file alone.
	wal := append([]byte(nil), seed(t, "wal.db-wal")...)
	wal[len(wal)-1] ^= 0xff
	cells, err = Read(seed(t, "wal.db"), wal)
	require.NoError(t, err)
	require.Empty(t, cells, "the one commit's last frame is torn: nothing committed")
}

// FuzzRead: any bytes, as a database and a WAL, give cells or an error,
// never a panic nor an endless walk.
func FuzzRead(f *testing.F) {
	f.Add(seed(f, "small.db"), []byte(nil))
	f.Add(seed(f, "wal.db"), seed(f, "wal.db-wal"))
	schema := seed(f, "wal.db")
	f.Add([]byte(nil), walOf(512, schema[:512], schema[512:1024], schema[1024:1536])) // a database in its WAL alone
	f.Fuzz(func(t *testing.T, db, wal []byte) {
		_, _ = Read(db, wal)
	})
}
