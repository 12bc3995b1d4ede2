package scan

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	betaKey   = "provider-key-beta-0a1b2c3d4e"
	alphaSoul = "soul-alpha-99aa88bb77"
)

// nestedMatcher looks for two tenants' canaries; betaKey is the one the
// bzip2 fixtures below hold.
func nestedMatcher(t testing.TB) *Matcher {
	t.Helper()
	m, err := Compile([]Pattern{{Owner: "beta", Kind: "provider_key", Value: betaKey}, {Owner: "alpha", Kind: "soul", Value: alphaSoul}})
	require.NoError(t, err)
	return m
}

// Made with Python's bz2 module (Go has no bzip2 writer): the first holds
// betaKey, the second the same kind of text without it, the third 64 MiB of
// zeros followed by betaKey.
var (
	bzipWithKey = mustHex("425a68393141592653596bc81683000007d980001040027c103e69d52020003141a34683203431b423d4d84d47a9e9a1a530530355cf63a324f14bf167f8a5d5a3dbc64c5142af212d40d8bb9229c284835e40b418")
	bzipClean   = mustHex("425a68393141592653597f66f00400000559800010400400102ef19f802000314c269a034c41a9a64d344cd346a719195f30a1a2a4447ecbf776e20382092a3afa8bceac0e7eafe2ee48a70a120fecde0080")
	bzipBomb    = mustHex("425a68393141592653590e09e2df015f8e4000c0000008200030804d4642a025a90a809731415926535947c216dc00a2745980c00000027c003e28d52000082000543280680686822a469a347a9a34c999485054101234015115056b9fa9ac776c751be74aa96e326978ce6740920124020023e2ee48a70a120b7a3a6c40")
)

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func gz(t testing.TB, data []byte) []byte {
	t.Helper()
	return squeeze(t, data, func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) })
}

func zl(t testing.TB, data []byte) []byte {
	t.Helper()
	return squeeze(t, data, func(w io.Writer) io.WriteCloser { return zlib.NewWriter(w) })
}

// squeeze writes data through the compressor open makes.
func squeeze(t testing.TB, data []byte, open func(io.Writer) io.WriteCloser) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := open(&b)
	_, err := zw.Write(data)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return b.Bytes()
}

type entry struct {
	name  string
	data  []byte
	store bool // zip: stored, not deflated
}

func zipOf(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		if e.store {
			h.Method = zip.Store
		}
		w, err := zw.CreateHeader(h)
		require.NoError(t, err)
		_, err = w.Write(e.data)
		require.NoError(t, err)
	}
	require.NoError(t, zw.Close())
	return b.Bytes()
}

func tarOf(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o600, Size: int64(len(e.data)), Typeflag: tar.TypeReg}))
		_, err := tw.Write(e.data)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return b.Bytes()
}

func logWith(secret string) []byte {
	return []byte(strings.Repeat("2026-12-01T07:00:00Z INFO request served in 12ms\n", 40) + "config: key=" + secret + "\n" + strings.Repeat("done.\n", 10))
}

// scanFile writes data to a file and scans it.
func scanFile(t *testing.T, m *Matcher, name string, data []byte) Report {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, data, 0o600))
	r := m.File(context.Background(), path)
	for i := range r.Hits {
		r.Hits[i].Path = filepath.Base(r.Hits[i].Path)
	}
	for i := range r.Skipped {
		r.Skipped[i].Path = filepath.Base(r.Skipped[i].Path)
	}
	return r
}

// TestContainersFoundAndNamed: a canary inside every container, alone and
// nested, is found once, and the finding names the way in; the same
// containers without the canary are clean.
func TestContainersFoundAndNamed(t *testing.T) {
	t.Parallel()
	m := nestedMatcher(t)
	plain := logWith("<redacted>")
	leaky := logWith(betaKey)
	for _, tc := range []struct {
		name      string
		file      func(log []byte) []byte
		container string // of the one hit (the file's own bytes hold nothing)
		bzipClean bool   // the clean variant is a fixture
	}{
		{"a.log.gz", func(l []byte) []byte { return gz(t, l) }, "gzip", false},
		{"a.log.z", func(l []byte) []byte { return zl(t, l) }, "zlib", false},
		{"a.log.bz2", nil, "bzip2", true},
		{"backup.zip", func(l []byte) []byte {
			return zipOf(t, entry{name: "notes/readme.txt", data: []byte("nothing here")}, entry{name: "logs/a.log", data: l})
		}, "zip:logs/a.log", false},
		{"backup-gz.zip", func(l []byte) []byte { return zipOf(t, entry{name: "logs/a.log.gz", data: gz(t, l)}) }, "zip:logs/a.log.gz -> gzip", false},
		{"home.tgz", func(l []byte) []byte {
			return gz(t, tarOf(t, entry{name: "home/x.txt", data: []byte("x")}, entry{name: "home/a.log", data: l}))
		}, "gzip -> tar:home/a.log", false},
		{"home.tar", func(l []byte) []byte { return tarOf(t, entry{name: "home/a.log.gz", data: gz(t, l)}) }, "tar:home/a.log.gz -> gzip", false},
		{"deep.zip", func(l []byte) []byte {
			inner := gz(t, tarOf(t, entry{name: "p/a.log.bz2", data: nil}, entry{name: "p/a.log.gz", data: gz(t, l)}))
			return zipOf(t, entry{name: "profiles/old.tgz", data: inner, store: true})
		}, "zip:profiles/old.tgz -> gzip -> tar:p/a.log.gz -> gzip", false},
		{"zip-in-zip.zip", func(l []byte) []byte {
			return zipOf(t, entry{name: "inner.zip", data: zipOf(t, entry{name: "k.txt", data: l})})
		}, "zip:inner.zip -> zip:k.txt", false},
		{"bz-in-tar.tar.gz", nil, "gzip -> tar:k.bz2 -> bzip2", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var dirty, clean []byte
			switch tc.name {
			case "a.log.bz2":
				dirty, clean = bzipWithKey, bzipClean
			case "bz-in-tar.tar.gz":
				dirty = gz(t, tarOf(t, entry{name: "k.bz2", data: bzipWithKey}))
				clean = gz(t, tarOf(t, entry{name: "k.bz2", data: bzipClean}))
			default:
				dirty, clean = tc.file(leaky), tc.file(plain)
			}
			require.NotContains(t, string(dirty), betaKey, "precondition: the key is not in the stored bytes")
			r := scanFile(t, m, tc.name, dirty)
			require.Empty(t, r.Skipped)
			require.Len(t, r.Hits, 1, "%+v", r.Hits)
			h := r.Hits[0]
			require.Equal(t, "beta", h.Pattern.Owner)
			require.Equal(t, Raw, h.Encoding)
			require.Equal(t, tc.container, h.Container)
			require.Equal(t, tc.name+"!"+strings.ReplaceAll(tc.container, " -> ", "!")+fmt.Sprintf(":%d", h.Start), h.Location())

			r = scanFile(t, m, tc.name, clean)
			require.Empty(t, r.Skipped)
			require.Empty(t, r.Hits)

			// Find sees the same in bytes held in memory.
			var got []Match
			m.Find(dirty, func(x Match) { got = append(got, x) })
			require.Len(t, got, 1)
			require.Equal(t, tc.container, got[0].Container)
		})
	}
}

// TestPlainArchiveMembersOnce: a member stored as is in a tar or zip is
// seen by the raw scan of the file, and not a second time as a member.
func TestPlainArchiveMembersOnce(t *testing.T) {
	t.Parallel()
	m := nestedMatcher(t)
	r := scanFile(t, m, "a.tar", tarOf(t, entry{name: "a.log", data: logWith(betaKey)}))
	require.Empty(t, r.Skipped)
	require.Len(t, r.Hits, 1)
	require.Equal(t, "", r.Hits[0].Container)
	r = scanFile(t, m, "a.zip", zipOf(t, entry{name: "a.log", data: logWith(betaKey), store: true}))
	require.Empty(t, r.Skipped)
	require.Len(t, r.Hits, 1)
	require.Equal(t, "", r.Hits[0].Container)
}

// TestWrappedBase64: base64 of a text holding the key, wrapped at PEM,
// MIME and other widths with any line ending (and "\n" escaped in JSON),
// is found exactly once wherever the line breaks fall; without the key it
// is clean.
func TestWrappedBase64(t *testing.T) {
	t.Parallel()
	m := nestedMatcher(t)
	unwrapped := 0
	for _, width := range []int{64, 76, 40, 16, 5} {
		for _, eol := range []string{"\n", "\r\n", `\n`} {
			for shift := 0; shift < 12; shift++ {
				for _, url := range []bool{false, true} {
					alg := base64.StdEncoding
					if url {
						alg = base64.URLEncoding
					}
					body := func(secret string) string {
						enc := alg.EncodeToString([]byte(strings.Repeat("~", shift) + "owner=beta;key=" + secret + ";~~~?>>"))
						var b strings.Builder
						for i := 0; i < len(enc); i += width {
							b.WriteString(enc[i:min(i+width, len(enc))] + eol)
						}
						return "-----BEGIN SECRET-----" + eol + b.String() + "-----END SECRET-----" + eol
					}
					name := fmt.Sprintf("width %d eol %q shift %d url %v", width, eol, shift, url)
					got := m.FindAll([]byte("{\"pem\": \"" + body(betaKey) + "\"}"))
					require.Len(t, got, 1, "%s: %+v", name, got)
					require.Equal(t, "beta", got[0].Pattern.Owner, name)
					require.Contains(t, []Encoding{Base64, Base64URL}, got[0].Encoding, name)
					if strings.HasPrefix(got[0].Container, "unwrapped@") {
						unwrapped++
					} else {
						require.Equal(t, "", got[0].Container, name)
					}
					require.Empty(t, m.FindAll([]byte(body(strings.Replace(betaKey, "beta", "bet4", 1)))), name)
				}
			}
		}
	}
	require.Positive(t, unwrapped, "some needles were cut by a line break")
}

// TestDecodeThenScan: base64 of gzip, hex of base64, base64 of hex and
// base64 of base64 of gzip are found, naming every layer; a canary three
// decodings deep is past the bound and found only when the bound is raised.
func TestDecodeThenScan(t *testing.T) {
	t.Parallel()
	m := nestedMatcher(t)
	b64 := func(b []byte) []byte { return []byte(base64.StdEncoding.EncodeToString(b)) }
	hx := func(b []byte) []byte { return []byte(hex.EncodeToString(b)) }
	secret := []byte("note: " + betaKey + " end")
	for _, tc := range []struct {
		name      string
		payload   []byte
		enc       Encoding
		container string
	}{
		{"base64 of gzip", b64(gz(t, secret)), Raw, "base64@6 -> gzip"},
		{"hex of base64", hx(b64(secret)), Base64, "hex@6"},
		{"base64 of hex", b64(hx(secret)), Hex, "base64@6"},
		{"base64 of base64 of gzip", b64(b64(gz(t, secret))), Raw, "base64@6 -> base64@0 -> gzip"},
		{"hex of zlib", hx(zl(t, secret)), Raw, "hex@6 -> zlib"},
		{"base64url of zip", []byte(base64.RawURLEncoding.EncodeToString(zipOf(t, entry{name: "k", data: secret}))), Raw, "base64@6 -> zip:k"},
	} {
		text := append(append([]byte("data: "), tc.payload...), "\nnext line\n"...)
		got := m.FindAll(text)
		require.Len(t, got, 1, "%s: %+v", tc.name, got)
		require.Equal(t, tc.enc, got[0].Encoding, tc.name)
		require.Equal(t, tc.container, got[0].Container, tc.name)

		clean := bytes.ReplaceAll(text, tc.payload, nil)
		require.Empty(t, m.FindAll(clean))
	}

	// Three decodings: base64 of base64 of base64 of the key's hex.
	deep := b64(b64(b64(hx(secret))))
	require.Empty(t, m.FindAll(deep), "past MaxDecodeDepth 2")
	l := m.Limits()
	l.MaxDecodeDepth = 3
	got := m.WithLimits(l).FindAll(deep)
	require.Len(t, got, 1)
	require.Equal(t, Hex, got[0].Encoding)
	require.Equal(t, "base64@0 -> base64@0 -> base64@0", got[0].Container)
}

// TestBombsRefused: a stream that expands past the limits is stopped and
// reported (naming the file and the member), never followed to the canary
// after it; with the limits raised the same file is read through.
func TestBombsRefused(t *testing.T) {
	t.Parallel()
	m := nestedMatcher(t)
	zeros := make([]byte, 24<<20) // past RatioFloor (16 MiB) at a ratio near 1000
	withKey := append(zeros, betaKey...)

	// Default limits: past 16 MiB at a ratio over 200.
	bomb := gz(t, withKey)
	r := scanFile(t, m, "zeros.gz", bomb)
	require.Empty(t, r.Hits, "the key after the bomb's bound is not reached")
	require.Len(t, r.Skipped, 1)
	require.ErrorIs(t, r.Skipped[0].Err, ErrBomb)
	require.Equal(t, "zeros.gz", r.Skipped[0].Path)
	require.Contains(t, r.Skipped[0].Reason, "in gzip: ")

	r = scanFile(t, m, "zeros.bz2", bzipBomb)
	require.Empty(t, r.Hits)
	require.Len(t, r.Skipped, 1)
	require.ErrorIs(t, r.Skipped[0].Err, ErrBomb)
	require.Contains(t, r.Skipped[0].Reason, "in bzip2: ")

	// A member of an archive: the finding names it.
	r = scanFile(t, m, "b.zip", zipOf(t, entry{name: "ok.txt", data: []byte("fine")}, entry{name: "big/zeros.bin", data: withKey}))
	require.Empty(t, r.Hits)
	require.Len(t, r.Skipped, 1)
	require.ErrorIs(t, r.Skipped[0].Err, ErrBomb)
	require.Contains(t, r.Skipped[0].Reason, "in zip:big/zeros.bin: ")

	// Size bound without a ratio: a member larger than MaxMember.
	small := m.WithLimits(Limits{MaxDepth: 5, MaxDecodeDepth: 2, MaxMember: 1 << 20, MaxTotal: 1 << 30, MaxRatio: 1 << 40,
		RatioFloor: 1 << 40, MaxBuffer: 1 << 20, MaxRun: 1 << 20, MaxCopy: 1 << 20})
	r = scanFile(t, small, "a.tgz", gz(t, tarOf(t, entry{name: "a.log.gz", data: gz(t, withKey[len(withKey)-(2<<20):])})))
	require.Empty(t, r.Hits)
	require.Len(t, r.Skipped, 1)
	require.ErrorIs(t, r.Skipped[0].Err, ErrBomb)
	require.Contains(t, r.Skipped[0].Reason, "in gzip -> tar:a.log.gz -> gzip: ")

	// Raised limits read the whole stream and find the key at its end.
	l := small.Limits()
	l.MaxMember = 4 << 20
	r = scanFile(t, m.WithLimits(l), "a.tgz", gz(t, tarOf(t, entry{name: "a.log.gz", data: gz(t, withKey[len(withKey)-(2<<20):])})))
	require.Empty(t, r.Skipped)
	require.Len(t, r.Hits, 1)
	require.Equal(t, int64(2<<20-len(betaKey)), r.Hits[0].Start)
}

// TestDepthBound: gzip nested seven deep is opened to MaxDepth and
// reported there; raising the bound finds the canary at the bottom.
func TestDepthBound(t *testing.T) {
	t.Parallel()
	m := nestedMatcher(t)
	data := logWith(betaKey)
	for range 7 {
		data = gz(t, data)
	}
	r := scanFile(t, m, "deep.gz", data)
	require.Empty(t, r.Hits)
	require.Len(t, r.Skipped, 1)
	require.ErrorIs(t, r.Skipped[0].Err, ErrTooDeep)
	require.Contains(t, r.Skipped[0].Reason, "in gzip -> gzip -> gzip -> gzip -> gzip: ")

	l := m.Limits()
	l.MaxDepth = 7
	r = scanFile(t, m.WithLimits(l), "deep.gz", data)
	require.Empty(t, r.Skipped)
	require.Len(t, r.Hits, 1)
	require.Equal(t, strings.TrimSuffix(strings.Repeat("gzip -> ", 7), " -> "), r.Hits[0].Container)
}

// TestSQLiteCopyBounded: a sparse file with a SQLite header claiming 2 GiB
// is not copied (the default bound is 256 MiB): its bytes are scanned in
// place, holes skipped, so the key written near its end is found, and the
// rows left unread are reported.
func TestSQLiteCopyBounded(t *testing.T) {
	t.Parallel()
	m := nestedMatcher(t)
	path := filepath.Join(t.TempDir(), "state.db")
	f, err := os.Create(path)
	require.NoError(t, err)
	_, err = f.Write(append([]byte(sqliteMagic), make([]byte, 84)...))
	require.NoError(t, err)
	at := int64(2<<30) - 4096
	_, err = f.WriteAt([]byte(betaKey), at)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(2<<30))
	require.NoError(t, f.Close())
	r := m.File(context.Background(), path)
	require.Len(t, r.Hits, 1)
	require.Equal(t, at, r.Hits[0].Start)
	require.Len(t, r.Skipped, 1)
	require.ErrorIs(t, r.Skipped[0].Err, ErrTooLarge)
	require.Contains(t, r.Skipped[0].Reason, "is 2147483648 bytes, over the 268435456-byte bound")
	require.Contains(t, r.Skipped[0].Reason, "its rows were not read")
}

// TestZipWithoutCentralDirectory: a zip cut short before its central
// directory is read member by member from the local headers (the deflate
// stream of each inflated to its end).
func TestZipWithoutCentralDirectory(t *testing.T) {
	t.Parallel()
	m := nestedMatcher(t)
	full := zipOf(t, entry{name: "a.txt", data: []byte("nothing here")}, entry{name: "logs/a.log", data: logWith(betaKey)})
	cut := full[:bytes.Index(full, []byte("PK\x01\x02"))] // the central directory's first header
	r := scanFile(t, m, "partial.zip", cut)
	require.Empty(t, r.Skipped)
	require.Len(t, r.Hits, 1)
	require.Equal(t, "zip:logs/a.log", r.Hits[0].Container)
	r = scanFile(t, m, "partial.zip", zipOf(t, entry{name: "logs/a.log", data: logWith("nothing")})[:len(cut)-40])
	require.Empty(t, r.Hits)
}
