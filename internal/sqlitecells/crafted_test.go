package sqlitecells

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// walOf is a WAL of the given page size whose header and frames (pages
// 1, 2, ... in order, the last a commit) have checksums SQLite would
// accept.
func walOf(size uint32, pages ...[]byte) []byte {
	w := make([]byte, 32)
	binary.BigEndian.PutUint32(w[0:], 0x377f0682)
	binary.BigEndian.PutUint32(w[4:], 3007000)
	binary.BigEndian.PutUint32(w[8:], size)
	binary.BigEndian.PutUint32(w[16:], 7) // salts
	binary.BigEndian.PutUint32(w[20:], 9)
	s0, s1 := walChecksum(binary.LittleEndian, w[:24], 0, 0)
	binary.BigEndian.PutUint32(w[24:], s0)
	binary.BigEndian.PutUint32(w[28:], s1)
	for i, page := range pages {
		h := make([]byte, 24)
		binary.BigEndian.PutUint32(h[0:], uint32(i+1))
		if i == len(pages)-1 {
			binary.BigEndian.PutUint32(h[4:], uint32(len(pages))) // the commit
		}
		copy(h[8:16], w[16:24])
		s0, s1 = walChecksum(binary.LittleEndian, h[:8], s0, s1)
		s0, s1 = walChecksum(binary.LittleEndian, page, s0, s1)
		binary.BigEndian.PutUint32(h[16:], s0)
		binary.BigEndian.PutUint32(h[20:], s1)
		w = append(append(w, h...), page...)
	}
	return w
}

// TestReadRefusesCraftedBytes: a tenant writes its own state database, so
// Read meets bytes made to break it: a WAL whose frames are shorter than
// a page header, a schema whose column list is empty or ends in a comma.
// Each is an error, never a panic.
func TestReadRefusesCraftedBytes(t *testing.T) {
	t.Parallel()
	schema := seed(t, "wal.db") // three pages: the schema, two empty tables
	_, err := Read(nil, walOf(512, schema[:512], schema[512:1024], schema[1024:1536]))
	require.NoError(t, err, "the positive control: a database in its WAL alone, read whole")

	// SQLite's recovery ignores a WAL whose page size it never writes: so
	// does Read, and the database (no file) is empty.
	cells, err := Read(nil, walOf(8, []byte("SQLite f")))
	require.NoError(t, err, "a WAL of 8-byte pages")
	require.Empty(t, cells)
	cells, err = Read(seed(t, "small.db"), walOf(8, []byte("SQLite f")))
	require.NoError(t, err, "the same WAL beside a database file")
	require.NotEmpty(t, cells, "the file's own rows")

	for _, sql := range []string{"CREATE TABLE t ()", "CREATE TABLE t (a TEXT,)", "CREATE TABLE t (a, , b)"} {
		_, _, _, err := tableColumns(sql)
		require.Error(t, err, sql)
	}
}
