package scan

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzFind: arbitrary bytes, and those bytes inside every container, never
// make the walker panic or hang, and a key appended to the bytes is found.
func FuzzFind(f *testing.F) {
	m := nestedMatcher(f)
	f.Add([]byte("plain"))
	f.Add(gz(f, []byte("x")))
	f.Add(zipOf(f, entry{name: "a", data: []byte("b")}))
	f.Add(tarOf(f, entry{name: "a", data: []byte("b")}))
	f.Add(bzipClean)
	f.Add(zl(f, []byte("QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=\n")))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, d := range [][]byte{data, gz(t, data), zipOf(t, entry{name: "f", data: data}), tarOf(t, entry{name: "f", data: data})} {
			m.Find(d, func(Match) {})
		}
		found := false
		m.Find(append(append([]byte(nil), data...), " "+betaKey...), func(x Match) { found = found || x.Container == "" && x.Pattern.Value == betaKey })
		if !found {
			t.Fatalf("the key after %q was not found", data)
		}
	})
}

// TestRunsAgreeWithNaive: the skipping run finder reports exactly the runs
// of runMin class bytes or more that a byte-by-byte search finds, and the
// shorter ones a line break cuts, in text, in base64 and at the edges, and
// in stretches long enough for two cursors, a run across their meeting
// point included.
func TestRunsAgreeWithNaive(t *testing.T) {
	t.Parallel()
	m := nestedMatcher(t)
	rng := rand.New(rand.NewPCG(3, 3))
	for round := range 240 {
		size := 3000
		if round%6 == 0 {
			size = 2*splitMin + rng.IntN(3*splitMin) // walked by two cursors
		}
		var b []byte
		for len(b) < size {
			switch rng.IntN(6) {
			case 0:
				b = append(b, base64.StdEncoding.EncodeToString(make([]byte, rng.IntN(60)))...)
			case 1:
				b = append(b, strings.Repeat("ab\n", rng.IntN(20))...)
			case 2:
				b = append(b, " .,\"é\t"[rng.IntN(7)])
			default:
				b = append(b, textCorpus(rng, rng.IntN(80))...)
			}
		}
		if size > 3000 {
			// A run across the point where the second cursor starts.
			mid := m.nestMin - 1 + (len(b)-m.nestMin+1)/2
			r := base64.StdEncoding.EncodeToString(make([]byte, rng.IntN(60)))
			copy(b[max(mid-rng.IntN(len(r)+1), 0):], r)
		}
		want := naiveRuns(m, b)
		require.Equal(t, want, foundRuns(m, b), "round %d", round)
	}
	// Runs of the lengths that matter just before, across and just after
	// the second cursor's start, each alone in text.
	text := bytes.Repeat([]byte("the text. "), 3*splitMin/10)
	mid := m.nestMin - 1 + (len(text)-m.nestMin+1)/2
	for _, l := range []int{m.nestMin, m.nestMin + 1, m.runMin - 1, m.runMin, m.runMin + 9} {
		r := []byte(strings.Repeat("QUJD", l)[:l])
		if l < m.runMin {
			r[l/2] = '\n' // a short run only counts when a break cuts it
		}
		for s := mid - l - 2; s <= mid+2; s++ {
			b := slices.Clone(text)
			copy(b[s:], r)
			b[s-1], b[s+l] = ' ', ' '
			want := naiveRuns(m, b)
			require.Len(t, want, 1, "length %d at %d", l, s)
			require.Equal(t, want, foundRuns(m, b), "length %d at %d", l, s)
		}
	}
}

// naiveRuns is what the run finder must report in b, found byte by byte,
// sorted.
func naiveRuns(m *Matcher, b []byte) []string {
	var want []string
	for s := 0; s < len(b); {
		if !runClass[b[s]] {
			s++
			continue
		}
		e := s
		for e < len(b) && runClass[b[e]] {
			e++
		}
		cut := bytes.ContainsAny(b[s:e], "\n\\") && runClass[b[s]] && e-s >= m.nestMin
		if e-s >= m.runMin || cut && hasInnerBreak(b[s:e]) {
			want = append(want, fmt.Sprintf("%d:%q", s, b[s:e]))
		}
		s = e
	}
	slices.Sort(want)
	return want
}

// foundRuns is what the run finder reports in b, sorted.
func foundRuns(m *Matcher, b []byte) []string {
	var got []string
	w := m.walker(context.Background(), func(Match) {}, nil)
	w.onRun = func(off int64, r []byte) { got = append(got, fmt.Sprintf("%d:%q", off, r)) }
	w.runs(b, 0, 0, loc{})
	slices.Sort(got)
	return got
}

// hasInnerBreak: a newline or backslash with a class byte on both sides.
func hasInnerBreak(r []byte) bool {
	for i := 1; i+1 < len(r); i++ {
		if r[i] == '\n' || r[i] == '\\' {
			if r[i-1] != '\r' || i >= 2 {
				return true
			}
		}
	}
	return false
}

// TestLongRunDecodedInAlignedPieces: a base64 run longer than MaxRun in a
// stream is decoded in pieces that keep the alignment, so a hex text in
// its third piece is found, at that piece's offset. (A run that a chunk
// holds whole is one piece.)
func TestLongRunDecodedInAlignedPieces(t *testing.T) {
	t.Parallel()
	m := nestedMatcher(t)
	l := m.Limits()
	l.MaxRun = 256
	m = m.WithLimits(l)
	plain := []byte(strings.Repeat("filler ", 60) + hex.EncodeToString([]byte(betaKey)) + strings.Repeat(" filler", 60))
	at := bytes.Index(plain, []byte(hex.EncodeToString([]byte(betaKey))))
	require.Greater(t, at*4/3, 2*256, "the hex starts in the third piece")
	require.Less(t, (at+2*len(betaKey))*4/3, 3*256, "and ends there")
	data := []byte("x " + base64.StdEncoding.EncodeToString(plain) + " y")
	for _, chunk := range []int{64, 100, 1 << 20} {
		var got []Match
		require.NoError(t, m.scan(bytes.NewReader(data), chunk, func(x Match) { got = append(got, x) }))
		require.Len(t, got, 1, "chunk %d", chunk)
		require.Equal(t, Hex, got[0].Encoding)
		want := "base64@514"
		if chunk > len(data) {
			want = "base64@2" // held whole in one chunk: one piece
		}
		require.Equal(t, want, got[0].Container, "chunk %d", chunk)
	}
}

// TestDecodedGuessesAreQuiet: text that decodes to a container's signature
// and then garbage is no problem to report (decoding is a guess), while a
// bomb reached through a decoding still is.
func TestDecodedGuessesAreQuiet(t *testing.T) {
	t.Parallel()
	m := nestedMatcher(t)
	garbage := append([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}, bytes.Repeat([]byte{0xde, 0xad}, 40)...)
	r := scanFile(t, m, "a.log", []byte("blob="+base64.StdEncoding.EncodeToString(garbage)+"\n"))
	require.Empty(t, r.Skipped)
	require.Empty(t, r.Hits)

	l := m.Limits()
	l.RatioFloor = 1 << 20
	r = scanFile(t, m.WithLimits(l), "b.log", []byte("blob="+base64.StdEncoding.EncodeToString(gz(t, make([]byte, 4<<20)))+"\n"))
	require.Len(t, r.Skipped, 1)
	require.ErrorIs(t, r.Skipped[0].Err, ErrBomb)
	require.Contains(t, r.Skipped[0].Reason, "in base64@5 -> gzip: ")
}

// TestFindAcrossBlocks: bytes held in memory are matched block by block; a
// needle, a base64 run and a run longer than several blocks that straddle
// block boundaries are all found once.
func TestFindAcrossBlocks(t *testing.T) {
	t.Parallel()
	m := nestedMatcher(t)
	filler := textCorpus(rand.New(rand.NewPCG(1, 1)), memBlock)
	raw := append(append([]byte(nil), filler[:memBlock-10]...), betaKey...)
	run := base64.StdEncoding.EncodeToString(gz(t, []byte("x "+alphaSoul)))
	withRun := append(append(append([]byte(nil), filler[:memBlock-len(run)/2]...), " "+run+" "...), filler...)
	var random bytes.Buffer
	for random.Len() < 3*memBlock {
		random.Write(gz(t, textCorpus(rand.New(rand.NewPCG(2, uint64(random.Len()))), 4096)))
	}
	inner := append(random.Bytes(), gz(t, []byte("x "+alphaSoul))...)
	long := append(append([]byte("blob: "), base64.StdEncoding.EncodeToString(zipOf(t, entry{name: "r", data: inner, store: true}))...), '\n')
	for name, tc := range map[string]struct {
		data      []byte
		owner     string
		container string
	}{
		"needle":   {raw, "beta", ""},
		"run":      {withRun, "alpha", fmt.Sprintf("base64@%d -> gzip", memBlock-len(run)/2+1)},
		"long run": {long, "alpha", "base64@6 -> zip:r -> gzip"}, // the member is gzip members back to back
	} {
		got := m.FindAll(tc.data)
		require.Len(t, got, 1, "%s: %+v", name, got)
		require.Equal(t, tc.owner, got[0].Pattern.Owner, name)
		require.Equal(t, tc.container, got[0].Container, name)
	}
}

// TestStopMaskOnlyStopsAtNonRunBytes: the run finder's 8-byte test flags a
// byte only if it is no run's, at every position, whatever its neighbours,
// and flags the common ones (space, '.', ':', '"', '=', '(').
func TestStopMaskOnlyStopsAtNonRunBytes(t *testing.T) {
	t.Parallel()
	for c := range 256 {
		for _, fill := range []byte{'A', ' ', '\n', 0xff, 0, '+', '{'} {
			for pos := range 8 {
				w := bytes.Repeat([]byte{fill}, 8)
				w[pos] = byte(c)
				mask := stopMask(binary.LittleEndian.Uint64(w))
				for k := range 8 {
					flagged := mask>>(8*k+7)&1 != 0
					require.False(t, flagged && runClass[w[k]], "byte %#x flagged at %d in %q", w[k], k, w)
				}
				if strings.IndexByte(" .:\"=(", byte(c)) >= 0 || c >= 0x80 {
					require.NotZero(t, mask>>(8*pos+7)&1, "byte %#x not flagged at %d in %q", c, pos, w)
				}
			}
		}
	}
}
