package scan

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"strconv"
	"strings"

	"github.com/tenantcanary/tenantcanary/internal/lru"
)

// Pattern is one canary the Matcher looks for: who owns it, what kind of
// canary it is, and its value. The JSON form is the one the scan command's
// --canaries file holds.
type Pattern struct {
	Owner string `json:"owner"`
	Kind  string `json:"kind"`
	Value string `json:"value"`
}

// MinValueLen is the shortest canary value a Matcher accepts: a shorter one
// could occur by chance, and would slow every scan down.
const MinValueLen = 8

// ErrBadPattern is wrapped by Compile's error for a pattern it refuses.
var ErrBadPattern = errors.New("bad canary pattern")

// Match is one occurrence of a pattern, in one encoding, in the bytes
// scanned or in something nested in them. Container is the way there, ""
// for the bytes themselves, else the layers outermost first joined by
// " -> ": "gzip", "zip:logs/a.log -> gzip", "base64@120 -> gzip",
// "hex@8 -> base64@0", "unwrapped@64" (a base64 block with its line
// breaks removed), "sqlite-row" (a file's SQLite row). Start and End are
// byte offsets (End exclusive) in the innermost layer, and Excerpt is a
// short quoted piece of the bytes around it.
type Match struct {
	Pattern   Pattern  `json:"pattern"`
	Encoding  Encoding `json:"encoding"`
	Container string   `json:"container,omitempty"`
	Start     int64    `json:"start"`
	End       int64    `json:"end"`
	Excerpt   string   `json:"excerpt"`
}

const (
	block     = 4  // bytes hashed per shift-table probe
	maxWindow = 32 // longest suffix of a needle the shift table is built from
	hashMul   = 0x9E3779B1
	vhashMul  = 0x9E3779B97F4A7C15
)

// Matcher finds every pattern in every encoding in one pass over the bytes.
// It is a Wu–Manber matcher: a table indexed by a hash of the last four bytes
// of a window of W bytes (W the shortest needle, at most 32) says how far the
// window may move without stepping over the end of any needle; a window whose
// shift is zero is verified exactly against the needles whose last eight
// bytes hash alike. The cost grows with the bytes scanned, and mostly falls
// as needles get longer, whatever the number of patterns.
//
// A Matcher is immutable once compiled and safe for concurrent use.
type Matcher struct {
	patterns []Pattern
	window   int
	maxLen   int
	nestMin  int // shortest needle but a raw one: what decoded bytes must hold to show anything new
	runMin   int // shortest base64 run worth decoding (its bytes could hold nestMin)
	limits   Limits

	shift     []uint8 // 1<<shiftBits entries
	shiftBits uint

	vstart []uint32 // 1<<vbits+1 entries: needles of verify bucket k are vids[vstart[k]:vstart[k+1]]
	vids   []uint32
	vbits  uint

	data []byte   // every needle, back to back
	noff []uint32 // needle i is data[noff[i]:noff[i+1]]
	npat []uint32 // pattern of needle i
	nenc []Encoding

	cache *FileCache        // WithCache
	fp    [sha256.Size]byte // the patterns' fingerprint, set by WithCache
}

// Compile builds a Matcher for patterns. Values must be at least MinValueLen
// bytes; the same value may not belong to two owners or kinds (a finding
// could not say whose it is); exact duplicates are kept once. A Matcher
// never changes once built (WithCache and WithLimits copy it), so the same
// patterns compiled again give the one built last time, while it is among
// the compiledKept last used: a scenario compiles the same canaries for
// every check after every phase.
func Compile(patterns []Pattern) (*Matcher, error) {
	fp := fingerprint(patterns)
	if m, ok := compiled.Get(fp); ok {
		return m, nil
	}
	m, err := build(patterns)
	if err != nil {
		return nil, err
	}
	compiled.Put(fp, m)
	return m, nil
}

// compiledKept is how many matchers Compile keeps for reuse: a catalog runs
// four scenarios at once, each with its whole set of tenants and each tenant
// alone (the positive controls). A matcher of 3 tenants holds about 90 KiB,
// one of 100 tenants about 4 MiB.
const compiledKept = 32

// compiled is Compile's reuse: the matchers last built, by the fingerprint
// of their patterns.
var compiled = lru.New[[sha256.Size]byte, *Matcher](compiledKept)

// build is Compile without reuse.
func build(patterns []Pattern) (*Matcher, error) {
	m := &Matcher{limits: DefaultLimits}
	seen := make(map[string]int, len(patterns))
	for i, p := range patterns {
		if len(p.Value) < MinValueLen {
			return nil, fmt.Errorf("canary %d (owner %q, kind %q): value %q is shorter than %d bytes: %w", i, p.Owner, p.Kind, p.Value, MinValueLen, ErrBadPattern)
		}
		if j, ok := seen[p.Value]; ok {
			if m.patterns[j] == p {
				continue
			}
			q := m.patterns[j]
			return nil, fmt.Errorf("canary value %q belongs to both %s/%s and %s/%s: %w", p.Value, q.Owner, q.Kind, p.Owner, p.Kind, ErrBadPattern)
		}
		seen[p.Value] = len(m.patterns)
		m.patterns = append(m.patterns, p)
	}

	// Needles: every encoded form of every pattern, each distinct byte
	// string once per pattern (a value whose base64 has no '+' or '/' is
	// the same needle in both alphabets, found as Base64).
	m.noff = append(m.noff, 0)
	minLen := maxWindow
	m.nestMin = 1 << 30
	for pi, p := range m.patterns {
		forms := encodedForms(p.Value)
		have := make(map[string]bool, len(forms))
		for _, f := range forms {
			if have[f.value] {
				continue
			}
			have[f.value] = true
			m.data = append(m.data, f.value...)
			m.noff = append(m.noff, uint32(len(m.data)))
			m.npat = append(m.npat, uint32(pi))
			m.nenc = append(m.nenc, f.enc)
			minLen = min(minLen, len(f.value))
			if f.enc != Raw {
				m.nestMin = min(m.nestMin, len(f.value))
			}
			m.maxLen = max(m.maxLen, len(f.value))
		}
	}
	m.window = minLen
	// A raw needle in decoded bytes repeats an encoded needle in the text,
	// so a run is decoded only when it is long enough to hold another.
	m.runMin = max(16, (4*m.nestMin+2)/3)
	n := len(m.npat)

	// Shift table over the last `window` bytes of every needle, sized by
	// the distinct blocks (a tenant's canaries share their tail, so most
	// blocks repeat): under one entry in 8 set, few collisions, and a
	// table small enough to stay in cache.
	// (Counted as the distinct hashes in a bit set four times the blocks.)
	probe := uint(min(max(bits.Len(uint(n*(m.window-block+1)*4)), 12), 24))
	set := make([]uint64, (1<<probe+63)/64)
	distinct := 0
	for i := 0; i < n; i++ {
		nd := m.needle(i)
		anchor := nd[len(nd)-m.window:]
		for j := block - 1; j < m.window; j++ {
			h := (binary.LittleEndian.Uint32(anchor[j-block+1:]) * hashMul) >> (32 - probe)
			if set[h/64]&(1<<(h%64)) == 0 {
				set[h/64] |= 1 << (h % 64)
				distinct++
			}
		}
	}
	m.shiftBits = uint(min(max(bits.Len(uint(distinct*8)), 12), 22))
	m.shift = make([]uint8, 1<<m.shiftBits)
	def := uint8(m.window - block + 1)
	for i := range m.shift {
		m.shift[i] = def
	}
	for i := 0; i < n; i++ {
		nd := m.needle(i)
		anchor := nd[len(nd)-m.window:]
		for j := block - 1; j < m.window; j++ {
			h := m.shiftHash(binary.LittleEndian.Uint32(anchor[j-block+1:]))
			if s := uint8(m.window - 1 - j); s < m.shift[h] {
				m.shift[h] = s
			}
		}
	}

	// Verify buckets keyed by the needle's last eight bytes.
	m.vbits = uint(min(max(bits.Len(uint(n*2)), 8), 24))
	m.vstart = make([]uint32, 1<<m.vbits+1)
	keys := make([]uint32, n)
	for i := 0; i < n; i++ {
		nd := m.needle(i)
		keys[i] = m.verifyHash(binary.LittleEndian.Uint64(nd[len(nd)-8:]))
		m.vstart[keys[i]+1]++
	}
	for k := 1; k < len(m.vstart); k++ {
		m.vstart[k] += m.vstart[k-1]
	}
	m.vids = make([]uint32, n)
	fill := make([]uint32, 1<<m.vbits)
	for i := 0; i < n; i++ {
		k := keys[i]
		m.vids[m.vstart[k]+fill[k]] = uint32(i)
		fill[k]++
	}
	return m, nil
}

func (m *Matcher) needle(i int) []byte { return m.data[m.noff[i]:m.noff[i+1]] }

func (m *Matcher) shiftHash(x uint32) uint32 { return (x * hashMul) >> (32 - m.shiftBits) }

func (m *Matcher) verifyHash(x uint64) uint32 { return uint32((x * vhashMul) >> (64 - m.vbits)) }

// Patterns returns the distinct patterns compiled, in order.
func (m *Matcher) Patterns() []Pattern { return append([]Pattern(nil), m.patterns...) }

// Needles is the number of encoded needles the patterns yielded.
func (m *Matcher) Needles() int { return len(m.npat) }

// MaxNeedle is the length of the longest needle: a stream scanned in pieces
// must overlap them by one byte less than this.
func (m *Matcher) MaxNeedle() int { return m.maxLen }

// Find calls fn for every match in data and in what is nested in it: a
// container data starts with (gzip, bzip2, zlib, zip, tar), base64 wrapped
// over lines, base64 and hex runs decoded and scanned again, all within
// m's Limits. Matches in data itself come in order of end offset (matches
// ending at the same byte in needle order), each nested one after the
// matches before its run or with its container. A part past a limit is
// left unscanned without a word: File and Tree report such parts.
func (m *Matcher) Find(data []byte, fn func(Match)) {
	m.walker(context.Background(), fn, nil).bytes(data, loc{})
}

// FindAll returns every match in data.
func (m *Matcher) FindAll(data []byte) []Match {
	var out []Match
	m.Find(data, func(x Match) { out = append(out, x) })
	return out
}

// find reports the matches in data that end after data[from-1]; base is the
// stream offset of data[0].
//
// Each step of the Wu–Manber loop waits on the shift it loads, so a long
// stretch is walked by several cursors at once (four over its quarters,
// or two over its halves when it is shorter), which the CPU overlaps; the
// later parts' matches, rare, are held until the parts before them are
// done, so matches still come in order of end offset.
func (m *Matcher) find(data []byte, base int64, from int, fn func(Match)) {
	if len(m.npat) == 0 {
		return
	}
	i := max(m.window-1, from)
	n := len(data)
	b := findParts(i, n)
	switch len(b) {
	case 2:
		m.walk(data, i, n, base, fn, nil)
	case 3:
		m.find2(data, base, b, fn)
	default:
		m.find4(data, base, b, fn)
	}
}

// splitMin is the shortest part find walks with a cursor of its own.
const splitMin = 4 << 10

// findParts cuts the windows ending at data[i:n] into the parts find walks
// at once: part k is the windows ending at data[b[k]:b[k+1]].
func findParts(i, n int) (b []int) {
	switch {
	case n-i >= 4*splitMin:
		q := (n - i) / 4
		return []int{i, i + q, i + 2*q, i + 3*q, n}
	case n-i >= 2*splitMin:
		return []int{i, i + (n-i)/2, n}
	}
	return []int{i, n}
}

func (m *Matcher) find2(data []byte, base int64, b []int, fn func(Match)) {
	shift := m.shift
	sh := 32 - m.shiftBits
	i, mid, j, n := b[0], b[1], b[1], b[2]
	var later []Match
	for i < mid && j < n {
		s := shift[(binary.LittleEndian.Uint32(data[i-3:])*hashMul)>>sh]
		t := shift[(binary.LittleEndian.Uint32(data[j-3:])*hashMul)>>sh]
		if s == 0 {
			m.verify(data, i, base, fn, nil)
			s = 1
		}
		if t == 0 {
			later = m.verify(data, j, base, nil, later)
			t = 1
		}
		i += int(s)
		j += int(t)
	}
	m.walk(data, i, mid, base, fn, nil)
	later = m.walk(data, j, n, base, nil, later)
	for _, x := range later {
		fn(x)
	}
}

func (m *Matcher) find4(data []byte, base int64, b []int, fn func(Match)) {
	shift := m.shift
	sh := 32 - m.shiftBits
	c0, c1, c2, c3 := b[0], b[1], b[2], b[3]
	e0, e1, e2, e3 := b[1], b[2], b[3], b[4]
	var l1, l2, l3 []Match
	for c0 < e0 && c1 < e1 && c2 < e2 && c3 < e3 {
		s0 := shift[(binary.LittleEndian.Uint32(data[c0-3:])*hashMul)>>sh]
		s1 := shift[(binary.LittleEndian.Uint32(data[c1-3:])*hashMul)>>sh]
		s2 := shift[(binary.LittleEndian.Uint32(data[c2-3:])*hashMul)>>sh]
		s3 := shift[(binary.LittleEndian.Uint32(data[c3-3:])*hashMul)>>sh]
		if uint32(s0)*uint32(s1)*uint32(s2)*uint32(s3) == 0 { // one branch, rarely taken
			if s0 == 0 {
				m.verify(data, c0, base, fn, nil)
				s0 = 1
			}
			if s1 == 0 {
				l1 = m.verify(data, c1, base, nil, l1)
				s1 = 1
			}
			if s2 == 0 {
				l2 = m.verify(data, c2, base, nil, l2)
				s2 = 1
			}
			if s3 == 0 {
				l3 = m.verify(data, c3, base, nil, l3)
				s3 = 1
			}
		}
		c0 += int(s0)
		c1 += int(s1)
		c2 += int(s2)
		c3 += int(s3)
	}
	m.walk(data, c0, e0, base, fn, nil)
	l1 = m.walk(data, c1, e1, base, nil, l1)
	l2 = m.walk(data, c2, e2, base, nil, l2)
	l3 = m.walk(data, c3, e3, base, nil, l3)
	for _, l := range [][]Match{l1, l2, l3} {
		for _, x := range l {
			fn(x)
		}
	}
}

// walk is the Wu–Manber loop over the windows ending at data[i:end]: each
// match goes to fn, or is appended to later when fn is nil.
func (m *Matcher) walk(data []byte, i, end int, base int64, fn func(Match), later []Match) []Match {
	shift := m.shift
	sh := 32 - m.shiftBits
	for i < end {
		s := shift[(binary.LittleEndian.Uint32(data[i-3:])*hashMul)>>sh]
		if s != 0 {
			i += int(s)
			continue
		}
		later = m.verify(data, i, base, fn, later)
		i++
	}
	return later
}

// verify reports the needles that end at data[i] to fn, or appends them to
// later when fn is nil.
func (m *Matcher) verify(data []byte, i int, base int64, fn func(Match), later []Match) []Match {
	k := m.verifyHash(binary.LittleEndian.Uint64(data[i-7:]))
	for _, id := range m.vids[m.vstart[k]:m.vstart[k+1]] {
		nd := m.needle(int(id))
		start := i + 1 - len(nd)
		if start < 0 || !bytes.Equal(data[start:i+1], nd) {
			continue
		}
		x := Match{
			Pattern:  m.patterns[m.npat[id]],
			Encoding: m.nenc[id],
			Start:    base + int64(start),
			End:      base + int64(i+1),
			Excerpt:  excerpt(data, start, i+1),
		}
		if fn == nil {
			later = append(later, x)
		} else {
			fn(x)
		}
	}
	return later
}

const excerptContext = 24

// excerpt quotes the match with a little context on each side, capped so a
// long encoded needle still gives a short line.
func excerpt(data []byte, start, end int) string {
	if end-start > 96 {
		end = start + 96
	}
	lo := max(start-excerptContext, 0)
	hi := min(end+excerptContext, len(data))
	return quote(data[lo:hi])
}

// quote is strconv.Quote(string(b)) in one allocation when b is printable
// ASCII with no quote or backslash, which most excerpts are: every match
// gets one, the tenants' own canaries included, so this is on the scan's
// hot path.
func quote(b []byte) string {
	for _, c := range b {
		if c < ' ' || c > '~' || c == '"' || c == '\\' {
			return strconv.Quote(string(b))
		}
	}
	var s strings.Builder
	s.Grow(len(b) + 2)
	s.WriteByte('"')
	s.Write(b)
	s.WriteByte('"')
	return s.String()
}

// chunkSize is how much of a stream Scan reads at a time (little enough to
// stay in the CPU's cache while it is matched and searched for runs).
const chunkSize = 256 << 10

// Scan reads r to its end and calls fn for every match, with offsets from
// the start of the stream, and for the wrapped base64 and the base64 and
// hex runs in it as Find does (a container is opened by File, not here).
// It holds one chunk (plus the overlap a needle may span, and a run still
// open, up to MaxRun) in memory, whatever the stream's size.
func (m *Matcher) Scan(r io.Reader, fn func(Match)) error {
	return m.scan(r, chunkSize, fn)
}

func (m *Matcher) scan(r io.Reader, chunkSize int, fn func(Match)) error {
	w := m.walker(context.Background(), fn, nil)
	w.chunk = chunkSize
	return w.stream(r, loc{})
}

// pairFilter reports UTF-16 text once: the UTF-16BE needle of a value also
// matches UTF-16LE text one byte earlier (the zero high byte of the previous
// character stands in for its leading zero), and the other way round. Of
// such a pair it keeps the one whose start is even, the alignment of text
// that starts with a BOM or at the start of a stream.
type pairFilter struct {
	emit    func(Match)
	pending []Match // UTF-16BE matches whose LE partner may still come
}

func (p *pairFilter) add(x Match) {
	kept := p.pending[:0]
	for _, be := range p.pending {
		if be.End+1 < x.End {
			p.emit(be)
		} else {
			kept = append(kept, be)
		}
	}
	p.pending = kept
	switch x.Encoding {
	case UTF16BE:
		p.pending = append(p.pending, x)
		return
	case UTF16LE:
		for i, be := range p.pending {
			if be.Pattern == x.Pattern && be.Start+1 == x.Start {
				p.pending = append(p.pending[:i], p.pending[i+1:]...)
				if be.Start%2 == 0 {
					x = be
				}
				break
			}
		}
	}
	p.emit(x)
}

func (p *pairFilter) flush() {
	for _, be := range p.pending {
		p.emit(be)
	}
	p.pending = p.pending[:0]
}

// FindChecked is Find that also says what it left unscanned: problem gets
// each part refused (a decompression bomb, a nesting past m's Limits) with
// the container path where it sits, and ctx ends a long scan. It serves
// values held in memory that are no file: a store's keys and rows.
func (m *Matcher) FindChecked(ctx context.Context, data []byte, fn func(Match), problem func(where string, err error)) {
	m.walker(ctx, fn, problem).bytes(data, loc{})
}
