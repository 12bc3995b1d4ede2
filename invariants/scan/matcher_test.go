package scan

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEncodedFormsDecodeBack(t *testing.T) {
	t.Parallel()
	v := "provider-key-alpha-3f9a0c1b2d"
	for _, f := range encodedForms(v) {
		switch f.enc {
		case Raw:
			require.Equal(t, v, f.value)
		case Hex, HexUpper:
			got, err := hex.DecodeString(f.value)
			require.NoError(t, err)
			require.Equal(t, v, string(got))
		case UTF16LE, UTF16BE:
			require.Len(t, f.value, 2*len(v))
		case Percent:
			got, err := hex.DecodeString(strings.ReplaceAll(f.value, "%", ""))
			require.NoError(t, err)
			require.Equal(t, v, string(got))
		case JSONEscape:
			got, err := strconv.Unquote(`"` + f.value + `"`)
			require.NoError(t, err)
			require.Equal(t, v, got)
		case Base64, Base64URL:
			// Each trimmed form sits inside the encoding of the value at
			// one of the three alignments, whatever surrounds it.
			alg := base64.StdEncoding
			if f.enc == Base64URL {
				alg = base64.URLEncoding
			}
			found := false
			for a := 0; a < 3; a++ {
				s := alg.EncodeToString([]byte(strings.Repeat("Q", a) + v + "zz"))
				found = found || strings.Contains(s, f.value)
			}
			require.True(t, found, "base64 form %q found at no alignment", f.value)
			require.GreaterOrEqual(t, len(f.value), len(v)*4/3-2)
		case Base32, Base32Lower, Base32Hex, Base32HexLower:
			// Likewise at one of the five alignments, padded or not.
			alg := base32.StdEncoding
			if f.enc == Base32Hex || f.enc == Base32HexLower {
				alg = base32.HexEncoding
			}
			found := false
			for a := 0; a < 5; a++ {
				s := alg.EncodeToString([]byte(strings.Repeat("Q", a) + v + "z"))
				if f.enc == Base32Lower || f.enc == Base32HexLower {
					s = strings.ToLower(s)
				}
				found = found || strings.Contains(s, f.value)
			}
			require.True(t, found, "base32 form %q found at no alignment", f.value)
			require.GreaterOrEqual(t, len(f.value), len(v)*8/5-2)
		default:
			t.Fatalf("unknown encoding %q", f.enc)
		}
	}
}

// TestFindsEveryEncoding plants one tenant's canary in every encoding (and
// base64 at every alignment) inside text, and expects exactly that finding.
func TestFindsEveryEncoding(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	m, pats := compileSeeded(t, rng, 4)
	target := pats[13] // beta's api_server_key
	for _, enc := range Encodings {
		for align := 0; align < 5; align++ {
			if align > 0 && alignments(enc) <= align {
				continue
			}
			t.Run(fmt.Sprintf("%s/%d", enc, align), func(t *testing.T) {
				t.Parallel()
				planted := plantForm(target.Value, enc, align)
				for _, lower := range []bool{false, true} {
					p := planted
					if lower {
						if enc != Percent && enc != JSONEscape {
							continue
						}
						p = strings.ToLower(planted)
					}
					text := "before the leak: " + p + " :after"
					got := m.FindAll([]byte(text))
					require.Len(t, got, 1, "in %q", text)
					require.Equal(t, target, got[0].Pattern)
					want := enc
					if enc == Base64URL && strings.Contains(base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", align)+target.Value+"~~")), text[got[0].Start:got[0].End]) {
						want = Base64 // the same bytes in both alphabets
					}
					require.Equal(t, want, got[0].Encoding)
					require.Contains(t, p, text[got[0].Start:got[0].End])
					require.NotEmpty(t, got[0].Excerpt)
				}
			})
		}
	}
}

func TestCleanTextStaysClean(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	m, pats := compileSeeded(t, rng, 2)
	v := pats[0].Value // provider-key-alpha-<tag>
	tag := v[len(v)-10:]
	for name, text := range map[string]string{
		"bare tag":          "the tag " + tag + " alone, and " + strings.ToUpper(tag),
		"tenant name alone": "alpha beta provider-key-alpha- model-beta-",
		"one char short":    v[:len(v)-1] + " and " + v[1:],
		"one char changed":  v[:len(v)-1] + "x",
		"hex of a prefix":   hex.EncodeToString([]byte(v[:len(v)-2])),
		"empty":             "",
		"short":             "abc",
	} {
		require.Empty(t, m.FindAll([]byte(text)), name)
	}
}

// naive finds every needle with bytes.Index, the reference the matcher
// must agree with.
func naive(m *Matcher, data []byte) []string {
	var out []string
	for id := range m.npat {
		nd := m.needle(id)
		for off := 0; ; {
			k := bytes.Index(data[off:], nd)
			if k < 0 {
				break
			}
			out = append(out, fmt.Sprintf("%d-%d %s %s", off+k, off+k+len(nd), m.patterns[m.npat[id]].Value, m.nenc[id]))
			off += k + 1
		}
	}
	slices.Sort(out)
	return out
}

func keys(ms []Match) []string {
	var out []string
	for _, x := range ms {
		out = append(out, fmt.Sprintf("%d-%d %s %s", x.Start, x.End, x.Pattern.Value, x.Encoding))
	}
	slices.Sort(out)
	return out
}

// TestAgreesWithNaiveAcrossChunks plants many canaries in every encoding at
// random places (some overlapping, some at the very edges) and checks that
// the matcher, whole and streamed in small chunks, finds exactly what a
// needle-by-needle search finds.
func TestAgreesWithNaiveAcrossChunks(t *testing.T) {
	t.Parallel()
	for seed := uint64(0); seed < 6; seed++ {
		rng := rand.New(rand.NewPCG(seed, 99))
		m, pats := compileSeeded(t, rng, 1+int(seed)*5)
		corpus := textCorpus(rng, 20000)
		for k := 0; k < 40; k++ {
			p := pats[rng.IntN(len(pats))]
			f := plantForm(p.Value, Encodings[rng.IntN(len(Encodings))], rng.IntN(3))
			off := rng.IntN(len(corpus) - len(f))
			if k == 0 {
				off = 0
			} else if k == 1 {
				off = len(corpus) - len(f)
			}
			copy(corpus[off:], f)
		}
		want := naive(m, corpus)
		require.NotEmpty(t, want)
		require.Equal(t, want, keys(m.FindAll(corpus)), "seed %d whole", seed)
		for _, chunk := range []int{1, 7, 64, 1000} {
			var got []Match
			require.NoError(t, m.scan(bytes.NewReader(corpus), chunk, func(x Match) { got = append(got, x) }))
			require.Equal(t, want, keys(got), "seed %d chunk %d", seed, chunk)
		}
	}
}

func TestCompileRefusesBadPatterns(t *testing.T) {
	t.Parallel()
	_, err := Compile([]Pattern{{Owner: "a", Kind: "model", Value: "short"}})
	require.ErrorIs(t, err, ErrBadPattern)
	require.ErrorContains(t, err, `"short"`)
	_, err = Compile([]Pattern{{Owner: "a", Kind: "model", Value: "model-a-0123456789"}, {Owner: "b", Kind: "model", Value: "model-a-0123456789"}})
	require.ErrorIs(t, err, ErrBadPattern)
	require.ErrorContains(t, err, "belongs to both")
	m, err := Compile([]Pattern{{Owner: "a", Kind: "model", Value: "model-a-0123456789"}, {Owner: "a", Kind: "model", Value: "model-a-0123456789"}})
	require.NoError(t, err)
	require.Len(t, m.Patterns(), 1)
	m, err = Compile(nil)
	require.NoError(t, err)
	require.Empty(t, m.FindAll([]byte("anything at all, model-a-0123456789")))
}

// TestMatcherMemoryFor1000Tenants holds the matcher for 1,000 tenants'
// canaries (every kind, every encoding) under 64 MiB of heap.
func TestMatcherMemoryFor1000Tenants(t *testing.T) {
	pats := testPatterns(rand.New(rand.NewPCG(5, 6)), 1000)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m, err := Compile(pats)
	require.NoError(t, err)
	runtime.GC()
	runtime.ReadMemStats(&after)
	used := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("1000 tenants: %d patterns, %d needles, window %d, matcher heap %.1f MiB", len(pats), m.Needles(), m.window, float64(used)/(1<<20))
	require.Less(t, used, int64(64<<20))
	require.Len(t, m.FindAll([]byte("x"+pats[4321].Value+"y")), 1)
	runtime.KeepAlive(m)
}

// BenchmarkScan measures the matcher over a generated text-like corpus
// holding canaries of 2 and of 64 tenants in every encoding, a few planted.
// SCAN_BENCH_MB sets the corpus size (default 32); SCAN_BENCH_DIR, when
// set, receives corpus-N.txt, raw-patterns-N.txt and canaries-N.json so
// that `grep -F -c -f raw-patterns-N.txt corpus-N.txt` and
// `canary-run scan --canaries canaries-N.json corpus-N.txt` can be timed
// beside it.
func BenchmarkScan(b *testing.B) {
	benchEachCorpus(b, func(b *testing.B, tenants int, rng *rand.Rand, pats []Pattern, corpus []byte) {
		planted := 0
		for k := 0; k < 8; k++ {
			f := plantForm(pats[rng.IntN(len(pats))].Value, Encodings[k%len(Encodings)], k%3)
			copy(corpus[rng.IntN(len(corpus)-len(f)):], f)
			planted++
		}
		m, err := Compile(pats)
		require.NoError(b, err)
		if dir := os.Getenv("SCAN_BENCH_DIR"); dir != "" {
			var raw strings.Builder
			for _, p := range pats {
				raw.WriteString(p.Value + "\n")
			}
			require.NoError(b, os.WriteFile(filepath.Join(dir, fmt.Sprintf("corpus-%d.txt", tenants)), corpus, 0o644))
			require.NoError(b, os.WriteFile(filepath.Join(dir, fmt.Sprintf("raw-patterns-%d.txt", tenants)), []byte(raw.String()), 0o644))
			js, err := json.Marshal(pats)
			require.NoError(b, err)
			require.NoError(b, os.WriteFile(filepath.Join(dir, fmt.Sprintf("canaries-%d.json", tenants)), js, 0o644))
		}
		b.SetBytes(int64(len(corpus)))
		b.ResetTimer()
		found := 0
		for b.Loop() {
			found = 0
			m.Find(corpus, func(Match) { found++ })
		}
		if found < planted-1 { // two plants may overlap
			b.Fatalf("found %d matches, planted %d", found, planted)
		}
	})
}

// BenchmarkFile is BenchmarkScan through File: the corpus read from a
// file (page cache) in chunks, as the scan command reads it.
func BenchmarkFile(b *testing.B) {
	benchEachCorpus(b, func(b *testing.B, tenants int, rng *rand.Rand, pats []Pattern, corpus []byte) {
		f := plantForm(pats[0].Value, Hex, 0)
		copy(corpus[len(corpus)/2:], f)
		path := filepath.Join(b.TempDir(), "corpus.txt")
		require.NoError(b, os.WriteFile(path, corpus, 0o600))
		m, err := Compile(pats)
		require.NoError(b, err)
		b.SetBytes(int64(len(corpus)))
		b.ResetTimer()
		for b.Loop() {
			r := m.File(context.Background(), path)
			if len(r.Hits) != 1 || len(r.Skipped) != 0 {
				b.Fatalf("hits %d, skipped %v", len(r.Hits), r.Skipped)
			}
		}
	})
}

// BenchmarkCompile measures building the matcher for 64 and 1,000 tenants
// (what Compile does for patterns it has not kept).
func BenchmarkCompile(b *testing.B) {
	for _, n := range []int{64, 1000} {
		b.Run(fmt.Sprintf("tenants=%d", n), func(b *testing.B) {
			pats := testPatterns(rand.New(rand.NewPCG(5, 6)), n)
			for b.Loop() {
				if _, err := build(pats); err != nil { // the building, not Compile's reuse
					b.Fatal(err)
				}
			}
		})
	}
}

// TestUTF16ReportedOnce: UTF-16 text matches both UTF-16 needles one byte
// apart; the one aligned on an even offset is reported.
func TestUTF16ReportedOnce(t *testing.T) {
	t.Parallel()
	pats := testPatterns(rand.New(rand.NewPCG(8, 8)), 2)
	m, err := Compile(pats)
	require.NoError(t, err)
	v := pats[7].Value
	for _, tc := range []struct {
		enc Encoding
		bom []byte
	}{{UTF16LE, []byte{0xff, 0xfe}}, {UTF16BE, []byte{0xfe, 0xff}}} {
		text := append([]byte(nil), tc.bom...)
		for _, c := range "say " + v + " ok" {
			if tc.enc == UTF16LE {
				text = append(text, byte(c), 0)
			} else {
				text = append(text, 0, byte(c))
			}
		}
		got := m.FindAll(text)
		require.Len(t, got, 1, "%s", tc.enc)
		require.Equal(t, tc.enc, got[0].Encoding)
		require.Zero(t, got[0].Start%2)
		var streamed []Match
		require.NoError(t, m.scan(bytes.NewReader(text), 5, func(x Match) { streamed = append(streamed, x) }))
		require.Equal(t, got, streamed)
	}
}

// TestCursorsMeet: find walks a long stretch with two or four cursors;
// needles planted across, just before and just after the point where each
// but the first starts, in every encoding, are all found, exactly as a
// needle-by-needle search finds them, in order of end offset.
func TestCursorsMeet(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(11, 12))
	m, pats := compileSeeded(t, rng, 3)
	for _, size := range []int{2*splitMin + m.window, 3*splitMin + 17, 4*splitMin + m.window, 50000} {
		b := findParts(m.window-1, size)
		require.Len(t, b, map[bool]int{false: 3, true: 5}[size >= 4*splitMin+m.window-1], "size %d", size)
		for _, enc := range Encodings {
			f := plantForm(pats[rng.IntN(len(pats))].Value, enc, rng.IntN(3))
			for _, cut := range b[1 : len(b)-1] {
				for _, end := range []int{cut - 1, cut, cut + 1, cut + len(f)/2, cut + len(f) - 1} {
					corpus := textCorpus(rng, size)
					copy(corpus[end-len(f):], f)
					copy(corpus[rng.IntN(b[1]-2*len(f)-2):], f) // and one in the first and last parts
					copy(corpus[b[len(b)-2]+len(f)+rng.IntN(size-b[len(b)-2]-2*len(f)):], f)
					want := naive(m, corpus)
					require.GreaterOrEqual(t, len(want), 3, "%s size %d end %d", enc, size, end)
					var got []Match // the matcher alone: FindAll decodes runs too
					m.find(corpus, 0, 0, func(x Match) { got = append(got, x) })
					require.Equal(t, want, keys(got), "%s size %d end %d", enc, size, end)
					for k := 1; k < len(got); k++ {
						require.LessOrEqual(t, got[k-1].End, got[k].End, "%s size %d: out of order", enc, size)
					}
				}
			}
		}
	}
}

// Compile gives the matcher it built for the same patterns again, one that
// finds what a fresh one finds, and keeps no more than compiledKept.
func TestCompileReusesTheMatcherOfTheSamePatterns(t *testing.T) {
	t.Parallel()
	// Patterns of its own (no other test compiles them): another test
	// compiling them meanwhile would keep them in use.
	pats := testPatterns(rand.New(rand.NewPCG(31, 32)), 3)
	a, err := Compile(pats)
	require.NoError(t, err)
	b, err := Compile(append([]Pattern(nil), pats...))
	require.NoError(t, err)
	require.Same(t, a, b, "the same patterns, the same matcher")
	fresh, err := build(pats)
	require.NoError(t, err)
	text := []byte("x " + pats[0].Value + " y " + base64.StdEncoding.EncodeToString([]byte(pats[4].Value)))
	require.Equal(t, fresh.FindAll(text), b.FindAll(text))
	require.NotEmpty(t, b.FindAll(text))
	c, err := Compile(pats[1:])
	require.NoError(t, err)
	require.NotSame(t, a, c, "other patterns, another matcher")
	// A copy made from it (a cache) leaves it as it was.
	require.NotNil(t, a.WithCache(NewFileCache()).WithLimits(Limits{}).cache)
	require.Nil(t, a.cache)
	require.Equal(t, DefaultLimits, a.limits)

	// Once compiledKept other sets were compiled since, it is no longer
	// kept: Compile builds a new one.
	for i := range compiledKept + 8 {
		_, err := Compile(testPatterns(rand.New(rand.NewPCG(100, uint64(i))), 1))
		require.NoError(t, err)
	}
	again, err := Compile(pats)
	require.NoError(t, err)
	require.NotSame(t, a, again, "the least recently used matcher was dropped")
	require.Equal(t, fresh.FindAll(text), again.FindAll(text))
}

// BenchmarkTreeOfSmallFiles scans a home-sized tree of small files (200
// of about 1 KiB), as the checks scan every changed file after a phase:
// a stream's buffer is the chunk size whatever the file's.
func BenchmarkTreeOfSmallFiles(b *testing.B) {
	pats := testPatterns(rand.New(rand.NewPCG(9, 10)), 3)
	m, err := Compile(pats)
	require.NoError(b, err)
	dir := b.TempDir()
	for i := range 200 {
		body := strings.Repeat(fmt.Sprintf("line %d of a tenant's notes\n", i), 40)
		if i == 7 {
			body += pats[0].Value + "\n"
		}
		require.NoError(b, os.WriteFile(filepath.Join(dir, fmt.Sprintf("note-%03d.md", i)), []byte(body), 0o600))
	}
	b.ReportAllocs()
	for b.Loop() {
		r := m.Tree(context.Background(), dir)
		if len(r.Hits) != 1 || len(r.Skipped) != 0 {
			b.Fatalf("hits %d, skipped %v", len(r.Hits), r.Skipped)
		}
	}
}

// No match comes from fewer than MinMatchLen bytes: every needle is at
// least that long, and so is the smallest container holding a canary.
func TestMinMatchLenBoundsEveryForm(t *testing.T) {
	t.Parallel()
	pats := testPatterns(rand.New(rand.NewPCG(41, 42)), 2)
	m, err := Compile(pats)
	require.NoError(t, err)
	short := m.MinMatchLen()
	require.Positive(t, short)
	for _, p := range pats {
		for _, f := range encodedForms(p.Value) {
			require.GreaterOrEqual(t, len(f.value), short, "%s of %s", f.enc, p.Value)
		}
		var gz bytes.Buffer
		w := gzip.NewWriter(&gz)
		_, _ = w.Write([]byte(p.Value))
		require.NoError(t, w.Close())
		require.GreaterOrEqual(t, gz.Len(), short)
		require.NotEmpty(t, m.FindAll(gz.Bytes()), "the gzip of %s", p.Value)
		require.Empty(t, m.FindAll([]byte(p.Value[:short-1])), "a match from %d bytes", short-1)
	}
}

// TestQuoteIsStrconvQuote: the excerpt's quoting is strconv.Quote's, on
// the plain ASCII it shortcuts and on every other byte.
func TestQuoteIsStrconvQuote(t *testing.T) {
	t.Parallel()
	cases := [][]byte{nil, []byte("plain text 123 ~!"), []byte(`a "quoted" b`), []byte(`back\slash`), []byte("tab\there"), []byte("del\x7f"), []byte("\xff\xfe"), []byte("ünïcode"), []byte("nul\x00")}
	for b := range 256 {
		cases = append(cases, []byte{'x', byte(b), 'y'})
	}
	for _, c := range cases {
		require.Equal(t, strconv.Quote(string(c)), quote(c), "%q", c)
	}
}
