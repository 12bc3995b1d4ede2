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
// the shorter ones a line break or escape cuts, which may hold a wrapped
// needle. For the first it looks at a window of runMin bytes from its end
// backwards and jumps past the first byte that is no run's, so it reads a
// few bytes of each window of text; for the second it looks around each
// line break and backslash.
func (w *walker) runs(data []byte, base int64, from int, at loc) {
	n := w.m.runMin
	if w.m.nestMin > len(data)-from {
		return
	}
	for j := from + n - 1; j < len(data); {
		// The last 8 bytes of the window at once: a space or a byte past
		// ASCII (no run's) ends every run there. (y's zero bytes are the
		// spaces, found exactly: no carry crosses a byte.)
		x := binary.LittleEndian.Uint64(data[j-7:])
		y := x ^ 0x2020202020202020
		if mask := (^(((y & 0x7f7f7f7f7f7f7f7f) + 0x7f7f7f7f7f7f7f7f) | y) | x) & 0x8080808080808080; mask != 0 {
			j += (63-bits.LeadingZeros64(mask))/8 - 7 + n
			continue
		}
		k := j
		for k > j-n && runClass[data[k]] {
			k--
		}
		if k > j-n {
			j = k + n
			continue
		}
		s := j - n + 1
		for s > from && runClass[data[s-1]] {
			s--
		}
		e := j + 1
		for e < len(data) && runClass[data[e]] {
			e++
		}
		w.run(data[s:e], base+int64(s), at)
		j = e + n
	}
	// Short runs cut by a break: a break with a class byte on either side.
	done := from // runs end at or before done were handled
	for _, sep := range []byte{'\n', '\\'} {
		done = from
		for i := from; ; {
			k := bytes.IndexByte(data[i:], sep)
			if k < 0 {
				break
			}
			i += k
			if i < done || i == from || i+1 >= len(data) || !runClass[data[i-1]] || !runClass[data[i+1]] ||
				(sep == '\n' && data[i-1] == '\r' && (i-1 == from || !runClass[data[i-2]])) {
				i++
				continue
			}
			s := i
			for s > from && runClass[data[s-1]] {
				s--
			}
			e := i + 1
			for e < len(data) && runClass[data[e]] {
				e++
			}
			if l := e - s; l >= w.m.nestMin && l < n && (sep == '\n' || bytes.IndexByte(data[s:e], '\n') < 0) {
				w.run(data[s:e], base+int64(s), at)
			}
			done, i = e, e
		}
	}
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
