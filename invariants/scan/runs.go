package scan

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"math/bits"
	"sort"
)

// runClass marks the bytes a base64 (either alphabet) or hex run is made
// of, with the line breaks and backslash escapes that wrap it (PEM and MIME
// lines, "\n" inside a JSON string).
var runClass = func() (t [256]bool) {
	for _, c := range []byte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_\r\n\\") {
		t[c] = true
	}
	return t
}()

// openRun returns where the run of class bytes that ends buf[:end] starts,
// not before from; end when buf[end-1] is not one.
func openRun(buf []byte, from, end int) int {
	i := end
	for i > from && runClass[buf[i-1]] {
		i--
	}
	return i
}

// runs finds the runs of class bytes in data[from:] that may hide a
// needle (base is the stream offset of data[0]) and unwraps and decodes
// each: those of at least runMin bytes, which may decode to something, and
// the shorter ones of at least nestMin that a line break or escape cuts,
// which may hold a wrapped needle. It looks at a window of nestMin bytes
// from its end backwards and jumps past the first byte that is no run's,
// so it reads a few bytes of each window of text, in one pass for both.
// As find does, it walks a long stretch with two cursors at once (each
// step waits on the bytes it loads), one per half; a run belongs to the
// half its first window ends in, and the runs are scanned in order once
// both are done.
func (w *walker) runs(data []byte, base int64, from int, at loc) {
	n := max(w.m.nestMin, 8) // the window: the shortest run worth a look
	if n > len(data)-from {
		return
	}
	spans := w.spans[:0]
	w.spans = nil // a run decoded below takes a slice of its own
	a, end := from+n-1, len(data)
	if end-a >= 2*splitMin {
		mid := a + (end-a)/2
		var second []int
		b := mid
		for a < mid && b < end {
			ma := stopMask(binary.LittleEndian.Uint64(data[a-7:]))
			mb := stopMask(binary.LittleEndian.Uint64(data[b-7:]))
			if ma != 0 {
				a += bits.Len64(ma)>>3 - 8 + n
			} else {
				a, spans = nextRun(data, from, a, n, 0, spans)
			}
			if mb != 0 {
				b += bits.Len64(mb)>>3 - 8 + n
			} else {
				b, second = nextRun(data, from, b, n, mid, second)
			}
		}
		for a < mid {
			a, spans = runStep(data, from, a, n, 0, spans)
		}
		for b < end {
			b, second = runStep(data, from, b, n, mid, second)
		}
		spans = append(spans, second...)
	} else {
		for a < end {
			a, spans = runStep(data, from, a, n, 0, spans)
		}
	}
	for k := 0; k+1 < len(spans); k += 2 {
		s, e := spans[k], spans[k+1]
		if e-s >= w.m.runMin || innerBreak(data[s:e]) {
			w.run(data[s:e], base+int64(s), at)
		}
	}
	w.spans = spans[:0]
}

// stopMask has the high bit set in each byte of x that is certainly no
// run's, so it ends every run there: a space and the other bytes from 0x0E
// to '*' (quotes, parentheses), '.', ':' to '@' (':', '=', '?'), and any
// byte past ASCII. (Each test is exact per byte: no carry crosses one.)
// The other bytes no run holds (',', braces) are left to runClass: a few
// cheap tests catch most text.
func stopMask(x uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	x7 := x &^ hi
	ge := func(c uint64) uint64 { return (x7 + (0x80-c)*lo) & hi } // byte >= c (below 0x80)
	eq := func(c uint64) uint64 {                                  // byte == c
		y := x ^ c*lo
		return ^(((y &^ hi) + (hi - lo)) | y) & hi
	}
	return hi & (x | (ge(0x0e) &^ ge('+')) | eq('.') | (ge(':') &^ ge('A')))
}

// runStep moves the run finder's cursor j (the end of a window of n bytes)
// one step: past the last byte stopMask flags in the window's last 8 bytes,
// else as nextRun does.
func runStep(data []byte, from, j, n, own int, spans []int) (int, []int) {
	if mask := stopMask(binary.LittleEndian.Uint64(data[j-7:])); mask != 0 {
		return j + bits.Len64(mask)>>3 - 8 + n, spans
	}
	return nextRun(data, from, j, n, own, spans)
}

// nextRun looks at the window of n bytes ending at data[j] from its end
// backwards: at a byte no run's it returns the next window's end past it;
// a window of class bytes is a run, whose bounds (extended back to from and
// on to the end of data) it appends to spans, unless its first window ends
// before own (the run belongs to the other cursor), and returns the end of
// the first window past it.
func nextRun(data []byte, from, j, n, own int, spans []int) (int, []int) {
	// 8 bytes at a time from the end (the caller tested the last 8), the
	// last word overlapping the window's start; then byte by byte, for the
	// bytes no run holds that stopMask leaves.
	lo := j - n + 1
	for p := j - 15; ; p -= 8 {
		p = max(p, lo)
		if mask := stopMask(binary.LittleEndian.Uint64(data[p:])); mask != 0 {
			return p + bits.Len64(mask)>>3 - 1 + n, spans
		}
		if p == lo {
			break
		}
	}
	k := j
	for k > j-n && runClass[data[k]] {
		k--
	}
	if k > j-n {
		return k + n, spans
	}
	s := j - n + 1
	for s > from && runClass[data[s-1]] {
		s--
	}
	e := j + 1
	for e < len(data) && runClass[data[e]] {
		e++
	}
	if s+n-1 >= own {
		spans = append(spans, s, e)
	}
	return e + n, spans
}

// innerBreak: run r (of class bytes) holds a line break or backslash with
// a class byte on either side, other than the "\n" of a "\r\n" it starts
// with (a line's end before the run, not a cut in it).
func innerBreak(r []byte) bool {
	if len(r) < 3 {
		return false
	}
	in := r[1 : len(r)-1] // in[k] is r[k+1]
	return cutBy(in, '\n', r[0]) || cutBy(in, '\\', r[0])
}

// cutBy: inner holds c, other than at its start after a '\r'.
func cutBy(inner []byte, c, before byte) bool {
	k := bytes.IndexByte(inner, c)
	return k > 0 || k == 0 && (before != '\r' || bytes.IndexByte(inner[1:], c) >= 0)
}

// run scans one run found at stream offset off: joined across the line
// breaks and escapes in it, for needles the breaks cut (wrapped base64);
// then, within the decode bounds, decoded from hex or base64 and scanned
// again, containers included (base64 of gzip, hex of base64).
func (w *walker) run(r []byte, off int64, at loc) {
	if w.onRun != nil {
		w.onRun(off, r)
	}
	t, removed, lines := normalize(r)
	if len(removed) > 0 {
		w.m.find(t, 0, 0, func(x Match) {
			// A needle that no removed byte cuts was matched in place.
			if i := sort.SearchInts(removed, int(x.Start)+1); i < len(removed) && removed[i] < int(x.End) {
				x.Container = at.childAt("unwrapped", off, false).path()
				w.emit(x)
			}
		})
	}
	if at.decodes >= w.lim.MaxDecodeDepth || at.depth >= w.lim.MaxDepth || len(t) < w.m.runMin {
		return
	}
	body := pickBody(t, lines)
	cls := kindOf(body)
	if cls&notHex == 0 {
		if len(body) < 2*w.m.nestMin {
			return
		}
		dec := w.scratch(at.decodes, len(body)/2)
		if _, err := hex.Decode(dec, body[:2*len(dec)]); err != nil {
			return
		}
		c := at.childAt("hex", off, true)
		// Raw matches in the decoded bytes repeat the hex needles' (one
		// case each: mixed-case hex is matched only decoded).
		c.dropRaw = cls&(hexLower|hexUpper) != hexLower|hexUpper
		w.bytes(dec, c)
		return
	}
	if len(body) < w.m.runMin || cls&(b64Std|b64URL) == b64Std|b64URL {
		return
	}
	enc := base64.RawStdEncoding
	if cls&b64URL != 0 {
		enc = base64.RawURLEncoding
	}
	if len(body)%4 == 1 {
		body = body[:len(body)-1]
	}
	dec := w.scratch(at.decodes, enc.DecodedLen(len(body)))
	n, err := enc.Decode(dec, body)
	if err != nil {
		return
	}
	c := at.childAt("base64", off, true)
	c.dropRaw = true // the base64 needles matched those in the text
	w.bytes(dec[:n], c)
}

// runKind sorts the characters of a run.
type runKind uint8

const (
	notHex   runKind = 1 << iota // a character no hex digit is
	hexLower                     // a-f
	hexUpper                     // A-F
	b64Std                       // + or /
	b64URL                       // - or _
)

var charKinds = func() (t [256]runKind) {
	for c := range 256 {
		switch {
		case '0' <= c && c <= '9':
		case 'a' <= c && c <= 'f':
			t[c] = hexLower
		case 'A' <= c && c <= 'F':
			t[c] = hexUpper
		case c == '+' || c == '/':
			t[c] = notHex | b64Std
		case c == '-' || c == '_':
			t[c] = notHex | b64URL
		default:
			t[c] = notHex
		}
	}
	return t
}()

// scratch returns a buffer of n bytes for a run decoded at decode depth
// d, reused by the next run at that depth.
func (w *walker) scratch(d, n int) []byte {
	for len(w.bufs) <= d {
		w.bufs = append(w.bufs, nil)
	}
	if cap(w.bufs[d]) < n {
		w.bufs[d] = make([]byte, n)
	}
	return w.bufs[d][:n]
}

// normalize drops the line breaks and backslash escapes from a run: t is
// what is left, removed the offsets in t before which something was
// dropped, lines the offsets in t where a line starts after a break.
func normalize(r []byte) (t []byte, removed, lines []int) {
	clean := true
	for _, c := range r {
		if c == '\n' || c == '\r' || c == '\\' {
			clean = false
			break
		}
	}
	if clean {
		return r, nil, nil
	}
	t = make([]byte, 0, len(r))
	mark := func(list []int) []int {
		if n := len(list); n == 0 || list[n-1] != len(t) {
			list = append(list, len(t))
		}
		return list
	}
	for i := 0; i < len(r); i++ {
		switch c := r[i]; c {
		case '\r', '\n':
			removed, lines = mark(removed), mark(lines)
		case '\\':
			removed = mark(removed)
			if i+1 < len(r) && (r[i+1] == 'n' || r[i+1] == 'r') {
				lines = mark(lines)
				i++
			}
		default:
			t = append(t, c)
		}
	}
	return t, removed, lines
}

// pickBody returns the part of a run that is a wrapped block: the longest
// stretch of lines of one length followed by at most one shorter line (a
// PEM or MIME body without the words around it). A last line in the
// other base64 alphabet ("-----END") is left out.
func pickBody(t []byte, lines []int) []byte {
	if len(lines) == 0 {
		return t
	}
	bounds := append(append([]int{0}, lines...), len(t))
	best, bs, be, last := 0, 0, 0, 0
	for i := 0; i+1 < len(bounds); i++ {
		l := bounds[i+1] - bounds[i]
		if l == 0 {
			continue
		}
		j := i + 1
		for j+1 < len(bounds) && bounds[j+1]-bounds[j] == l {
			j++
		}
		lastStart := bounds[j-1]
		if j+1 < len(bounds) {
			if s := bounds[j+1] - bounds[j]; s > 0 && s < l {
				lastStart = bounds[j]
				j++
			}
		}
		if tot := bounds[j] - bounds[i]; tot > best {
			best, bs, be, last = tot, bounds[i], bounds[j], lastStart
		}
	}
	body := t[bs:be]
	if last > bs && (mixedAlphabets(body) && !mixedAlphabets(t[bs:last]) ||
		kindOf(t[bs:last])&notHex == 0 && kindOf(t[last:be])&notHex != 0) {
		// The last line is the words after the block, not its end.
		body = t[bs:last]
	}
	return body
}

func kindOf(b []byte) runKind {
	var k runKind
	for _, c := range b {
		k |= charKinds[c]
	}
	return k
}

func mixedAlphabets(b []byte) bool {
	return bytes.ContainsAny(b, "+/") && bytes.ContainsAny(b, "-_")
}
