package scan

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unicode/utf16"

	"github.com/stretchr/testify/require"
)

func compileTest(t *testing.T, n int) (*Matcher, []Pattern) {
	t.Helper()
	return compileSeeded(t, rand.New(rand.NewPCG(11, uint64(n))), n)
}

// compileSeeded compiles the canaries of n tenants testPatterns draws
// from rng.
func compileSeeded(t testing.TB, rng *rand.Rand, n int) (*Matcher, []Pattern) {
	t.Helper()
	pats := testPatterns(rng, n)
	m, err := Compile(pats)
	require.NoError(t, err)
	return m, pats
}

func hitsBy(r Report, container string) []Hit {
	var out []Hit
	for _, h := range r.Hits {
		if h.Container == container {
			out = append(out, h)
		}
	}
	return out
}

// openWAL opens a database in WAL mode with automatic checkpoints off, so
// what is written stays in the -wal file until the test says otherwise.
func openWAL(t testing.TB, path string) *sql.DB {
	t.Helper()
	db := openAt(t, path, 4096)
	mustExec(t, db, `CREATE TABLE messages (id INTEGER PRIMARY KEY, content TEXT, blob BLOB)`)
	return db
}

// mustExec runs a statement on db, failing the test on an error.
func mustExec(t testing.TB, db *sql.DB, query string, args ...any) {
	t.Helper()
	_, err := db.Exec(query, args...)
	require.NoError(t, err)
}

func digest(t *testing.T, paths ...string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		require.NoError(t, err)
		out[p] = sha256.Sum256(b)
	}
	return out
}

func TestSQLiteWALFrameOnly(t *testing.T) {
	t.Parallel()
	m, pats := compileTest(t, 2)
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	db := openWAL(t, path)
	mustExec(t, db, `PRAGMA wal_checkpoint(TRUNCATE)`)
	leak := pats[0]
	mustExec(t, db, `INSERT INTO messages (content) VALUES (?)`, "hello "+leak.Value)
	main, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NotContains(t, string(main), leak.Value, "precondition: the row is in the WAL only")

	files := []string{path, path + "-wal", path + "-shm"}
	before := digest(t, files...)
	r := m.Tree(context.Background(), dir)
	require.Empty(t, r.Skipped)
	require.Equal(t, before, digest(t, files...), "the scan changed the live database files")

	var walHits, rowHits int
	for _, h := range r.Hits {
		require.Equal(t, leak, h.Pattern)
		switch {
		case h.Container == "" && h.Path == path+"-wal":
			walHits++
		case h.Container == "sqlite-row":
			rowHits++
			require.Equal(t, "messages row 1 content", h.Row)
			require.Equal(t, path+"[messages row 1 content]:6", h.Location())
		default:
			t.Errorf("unexpected hit %+v", h)
		}
	}
	require.Equal(t, 1, walHits, "raw scan of the WAL frame")
	require.Equal(t, 1, rowHits, "row scan through the WAL")
}

// TestSQLiteOverflowAndDeleted plants a long value of canary copies, some
// of which straddle an overflow page boundary: only the row scan sees those
// whole. A deleted row is seen by the raw scan alone.
func TestSQLiteOverflowAndDeleted(t *testing.T) {
	t.Parallel()
	m, pats := compileTest(t, 2)
	path := filepath.Join(t.TempDir(), "state.db")
	db := openWAL(t, path)
	leak := pats[3]
	// A value of ~20 KiB made of back-to-back copies: each overflow page
	// boundary cuts one copy in two in the raw pages. (One row only: a
	// page split would leave stale copies in unused space.)
	copies := 20000 / (len(leak.Value) + 1)
	mustExec(t, db, `INSERT INTO messages (id, content) VALUES (1, ?)`, strings.Repeat(leak.Value+".", copies))
	deleted := pats[5]
	mustExec(t, db, `INSERT INTO messages (id, blob) VALUES (1000, ?)`, []byte("gone "+deleted.Value))
	mustExec(t, db, `DELETE FROM messages WHERE id = 1000`)
	mustExec(t, db, `PRAGMA wal_checkpoint(TRUNCATE)`)

	r := m.File(context.Background(), path)
	require.Empty(t, r.Skipped)
	var rawLeak, rowLeak, rawDeleted, rowDeleted int
	for _, h := range r.Hits {
		switch {
		case h.Pattern == leak && h.Container == "":
			rawLeak++
		case h.Pattern == leak && h.Container == "sqlite-row":
			rowLeak++
		case h.Pattern == deleted && h.Container == "":
			rawDeleted++
		case h.Pattern == deleted:
			rowDeleted++
		}
	}
	require.Equal(t, copies, rowLeak, "every copy is whole through SQL")
	require.Less(t, rawLeak, copies, "some copies straddle an overflow page boundary")
	require.Positive(t, rawLeak)
	require.Positive(t, rawDeleted, "a deleted row's bytes stay in the page")
	require.Zero(t, rowDeleted)
}

func TestGzipAndUTF16Files(t *testing.T) {
	t.Parallel()
	m, pats := compileTest(t, 2)
	dir := t.TempDir()

	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err := zw.Write([]byte(strings.Repeat("log line\n", 1000) + "key=" + pats[1].Value + "\n"))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	require.NotContains(t, gz.String(), pats[1].Value)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "agent.log.1.gz"), gz.Bytes(), 0o600))

	var u16 []byte
	for _, c := range utf16.Encode([]rune("memo: " + pats[12].Value + "\r\n")) {
		u16 = append(u16, byte(c), byte(c>>8))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), append([]byte{0xff, 0xfe}, u16...), 0o600))

	r := m.Tree(context.Background(), dir)
	require.Empty(t, r.Skipped)
	require.Len(t, r.Hits, 2)
	g := hitsBy(r, "gzip")
	require.Len(t, g, 1)
	require.Equal(t, pats[1], g[0].Pattern)
	require.Equal(t, Raw, g[0].Encoding)
	require.Equal(t, filepath.Join(dir, "agent.log.1.gz")+"!gzip:9004", g[0].Location())
	u := hitsBy(r, "")
	require.Len(t, u, 1)
	require.Equal(t, pats[12], u[0].Pattern)
	require.Equal(t, UTF16LE, u[0].Encoding)
	require.Equal(t, int64(2+2*6), u[0].Start)
}

func TestTreeSymlinksFIFOsAndUnreadable(t *testing.T) {
	t.Parallel()
	m, pats := compileTest(t, 2)
	outside := t.TempDir()
	dir := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	require.NoError(t, os.WriteFile(secret, []byte(pats[0].Value), 0o600))
	require.NoError(t, os.Symlink(secret, filepath.Join(dir, "link.txt")))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "linkdir")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o600))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o700))
	locked := filepath.Join(dir, "sub", "locked.db")
	require.NoError(t, os.WriteFile(locked, []byte(pats[2].Value), 0o600))
	plain := filepath.Join(dir, "sub", "plain.txt")
	require.NoError(t, os.WriteFile(plain, []byte("x "+pats[4].Value), 0o600))

	// Root reads everything, so the unreadable file is made by the opener.
	denied := func(path string) (*os.File, error) {
		if path == locked {
			return nil, &os.PathError{Op: "open", Path: path, Err: syscall.EACCES}
		}
		return openRegular(path)
	}
	var r Report
	m.tree(context.Background(), dir, denied, &r)
	require.Len(t, r.Hits, 1, "only the plain file: no symlink followed, the FIFO skipped")
	require.Equal(t, plain, r.Hits[0].Path)
	require.Len(t, r.Skipped, 1)
	require.Equal(t, locked, r.Skipped[0].Path)
	require.Contains(t, r.Skipped[0].Reason, "permission denied")

	r = m.Tree(context.Background(), filepath.Join(dir, "linkdir"))
	require.Empty(t, r.Hits)
	require.Len(t, r.Skipped, 1)
	require.Contains(t, r.Skipped[0].Reason, "symlink")

	r = m.Tree(context.Background(), filepath.Join(dir, "missing"))
	require.Len(t, r.Skipped, 1)
	require.Contains(t, r.Skipped[0].Reason, "no such file")

	r = m.File(context.Background(), plain)
	require.Len(t, r.Hits, 1)
}

// TestTreeIgnoresVanishedFiles: a file listed and then removed before it
// was opened is gone, not unreadable; a missing root is still reported.
func TestTreeIgnoresVanishedFiles(t *testing.T) {
	t.Parallel()
	m, _ := compileTest(t, 2)
	dir := t.TempDir()
	gone := filepath.Join(dir, "tmp-123.log")
	require.NoError(t, os.WriteFile(gone, []byte("x"), 0o600))
	vanish := func(path string) (*os.File, error) {
		if path == gone {
			require.NoError(t, os.Remove(gone))
		}
		return openRegular(path)
	}
	var r Report
	m.tree(context.Background(), dir, vanish, &r)
	require.Empty(t, r.Skipped)
	r = Report{}
	m.tree(context.Background(), gone, openRegular, &r)
	require.Len(t, r.Skipped, 1)
}
