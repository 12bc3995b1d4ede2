package scan

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"
)

// zst compresses data into one Zstandard frame; raw asks for a frame of
// raw (stored) blocks.
func zst(t testing.TB, data []byte, raw bool) []byte {
	t.Helper()
	opts := []zstd.EOption{zstd.WithEncoderConcurrency(1)}
	if raw {
		opts = append(opts, zstd.WithNoEntropyCompression(true), zstd.WithEncoderLevel(zstd.SpeedFastest))
	}
	enc, err := zstd.NewWriter(nil, opts...)
	require.NoError(t, err)
	defer enc.Close()
	return enc.EncodeAll(data, nil)
}

// transcript is a server's transcript event of a few KiB, as servers
// compress them (JSON, with the secret once in the middle).
func transcript(secret string) []byte {
	var b strings.Builder
	b.WriteString(`{"type":"event","session":"s-1","messages":[`)
	for i := range 60 {
		fmt.Fprintf(&b, `{"role":"assistant","text":"step %d of the plan: read the file, summarise it, and report back to the user"},`, i)
	}
	b.WriteString(`{"role":"system","text":"operator token ` + secret + `"}]}`)
	return []byte(b.String())
}

// TestZstdFramesFound: a canary in a Zstandard frame is found, in a file,
// nested in gzip, and in an SQLite blob (the row reader opens it), and the
// finding names the way in. The positive control is the precondition that
// the compressed bytes do not hold the canary as it is, so only decoding
// can find it; the same frames without the canary are clean.
func TestZstdFramesFound(t *testing.T) {
	t.Parallel()
	m := nestedMatcher(t)
	frame := zst(t, transcript(betaKey), false)
	require.False(t, bytes.Contains(frame, []byte(betaKey)), "the control: the frame hides the key from a raw scan")
	require.True(t, isZstd(frame))

	r := scanFile(t, m, "event.zst", frame)
	require.Empty(t, r.Skipped)
	require.Len(t, r.Hits, 1)
	require.Equal(t, betaKey, r.Hits[0].Pattern.Value)
	require.Equal(t, "zstd", r.Hits[0].Container)

	r = scanFile(t, m, "event.zst.gz", gz(t, frame))
	require.Len(t, r.Hits, 1)
	require.Equal(t, "gzip -> zstd", r.Hits[0].Container)

	// A frame of raw blocks holds the key as it is: found once, whichever
	// way it is read.
	rawFrame := zst(t, transcript(betaKey), true)
	r = scanFile(t, m, "raw.zst", rawFrame)
	require.NotEmpty(t, r.Hits)

	clean := zst(t, transcript("nothing-secret-here"), false)
	r = scanFile(t, m, "clean.zst", clean)
	require.Empty(t, r.Hits)
	require.Empty(t, r.Skipped)
}

// TestZstdInSQLiteBlob: a transcript event stored zstd-compressed in a blob
// column of a WAL-mode database (as a real server does for every event of
// 1 KiB or more) is found by the row reader, from the WAL and after a
// checkpoint.
func TestZstdInSQLiteBlob(t *testing.T) {
	t.Parallel()
	m := nestedMatcher(t)
	path := filepath.Join(t.TempDir(), "state.db")
	db := openWAL(t, path)
	frame := zst(t, transcript(betaKey), false)
	require.False(t, bytes.Contains(frame, []byte(betaKey)))
	mustExec(t, db, `INSERT INTO messages (id, blob) VALUES (1, ?)`, frame)
	for _, when := range []string{"in the WAL", "after a checkpoint"} {
		r := m.File(context.Background(), path)
		require.Empty(t, r.Skipped, when)
		var rows int
		for _, h := range r.Hits {
			require.Equal(t, betaKey, h.Pattern.Value, when)
			if strings.HasSuffix(h.Container, "zstd") {
				rows++
			}
		}
		require.Positive(t, rows, "%s: the row reader decodes the blob's frame: %+v", when, r.Hits)
		mustExec(t, db, `PRAGMA wal_checkpoint(TRUNCATE)`)
	}
}

// TestZstdBombRefused: a frame that expands past the limits is stopped and
// reported, never followed to the key after it.
func TestZstdBombRefused(t *testing.T) {
	t.Parallel()
	m := nestedMatcher(t)
	withKey := append(make([]byte, 24<<20), betaKey...)
	r := scanFile(t, m, "zeros.zst", zst(t, withKey, false))
	// The key is stored as a literal after the run of zeros, so the raw
	// scan sees it; the decoder must never reach it.
	require.Empty(t, hitsBy(r, "zstd"), "the key after the bomb's bound is not reached")
	require.Len(t, r.Skipped, 1)
	require.ErrorIs(t, r.Skipped[0].Err, ErrBomb)
	require.Contains(t, r.Skipped[0].Reason, "in zstd: ")
}
