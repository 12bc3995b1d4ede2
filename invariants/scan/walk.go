package scan

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
)

// Limits bound what a scan opens below the bytes it is given: how deep
// containers and decodings nest, how much decompression may yield, and how
// much is held in memory at once. A part past a bound is not followed; File
// and Tree report it in Skipped (Find cannot report, and leaves it).
type Limits struct {
	MaxDepth       int   // layers of containers and decodings below the bytes scanned
	MaxDecodeDepth int   // of those, decodings of base64 or hex text (base64 of gzip is one)
	MaxMember      int64 // bytes one decompressed stream or archive member may yield
	MaxTotal       int64 // bytes all decompression under one scanned file may yield
	MaxRatio       int64 // output per input byte a decompressor may reach ...
	RatioFloor     int64 // ... once it has yielded this many bytes
	MaxBuffer      int64 // a nested zip (read at random) is held in memory up to this size
	MaxRun         int   // longest base64 or hex run decoded as one piece
	MaxCopy        int64 // a SQLite database (or its WAL) larger than this is not copied to be read row by row
}

// DefaultLimits are a Matcher's limits unless WithLimits says otherwise.
var DefaultLimits = Limits{
	MaxDepth:       5,
	MaxDecodeDepth: 2,
	MaxMember:      256 << 20,
	MaxTotal:       1 << 30,
	MaxRatio:       200,
	RatioFloor:     16 << 20,
	MaxBuffer:      64 << 20,
	MaxRun:         16 << 20,
	MaxCopy:        256 << 20,
}

// Errors a scan reports (in Skip.Err) for a part it refused to follow.
var (
	// ErrBomb: a decompressed stream grew past MaxMember or MaxTotal, or
	// past MaxRatio times its input: it was not read further.
	ErrBomb = errors.New("decompression bomb refused")
	// ErrTooDeep: a container nested past MaxDepth was not opened (its
	// bytes were scanned as they are).
	ErrTooDeep = errors.New("nested past the depth bound: not opened")
	// ErrTooLarge: a part is larger than the memory or copy bound for the
	// way it must be read.
	ErrTooLarge = errors.New("too large to open")
)

// WithLimits returns a copy of m that scans within l.
func (m *Matcher) WithLimits(l Limits) *Matcher {
	c := *m
	c.limits = l
	return &c
}

// Limits returns the bounds m scans within.
func (m *Matcher) Limits() Limits { return m.limits }

// MinMatchLen is the fewest bytes a match can come from: no needle, in
// any encoding, is shorter, and what a decoding or a container yields is
// no longer than its input (a canary is random: it does not compress). A
// caller with many short pieces (the strings of a JSON document) skips
// those shorter than this without a look.
func (m *Matcher) MinMatchLen() int { return m.window }

// walker scans one piece of input (a file, or the bytes given to Find) and
// everything nested in it: it owns the budget of decompressed bytes and
// reports matches and refused parts to its caller.
type walker struct {
	m       *Matcher
	ctx     context.Context
	lim     Limits
	chunk   int                         // bytes read from a stream at a time
	emit    func(Match)                 // every match, its Container set
	problem func(where string, e error) // a part not (wholly) scanned; where is its container path
	total   int64                       // bytes decompression has yielded so far
	bufs    [][]byte                    // decoded runs, one buffer per decode depth
	onRun   func(off int64, run []byte) // a test's view of every run found
	spans   []int                       // the run finder's runs (start, end pairs), reused
}

func (m *Matcher) walker(ctx context.Context, emit func(Match), problem func(string, error)) *walker {
	if problem == nil {
		problem = func(string, error) {}
	}
	return &walker{m: m, ctx: ctx, lim: m.limits, chunk: chunkSize, emit: emit, problem: problem}
}

// loc is where a stream sits: the container path that reached it and how
// deep it is nested. Its path is built only when a match or a problem
// needs it (most decoded runs hold nothing).
type loc struct {
	prefix  string // the path of the parent
	name    string // this layer: "gzip", "zip:a/b.log", "base64" ("" for the bytes scanned)
	off     int64  // where this layer starts in the parent, or -1 when that is not part of its name
	depth   int    // containers and decodings above it
	decodes int    // decodings above it
	dropRaw bool   // raw matches here repeat an encoded match in the parent
	// guess: reached through a decoded run or a weak signature, which may
	// be chance; a format error there is no problem worth reporting
	// (decoded text is often no container at all), a bomb still is.
	guess bool
}

// path is the container path: "zip:a/b.log -> gzip", "base64@120", "".
func (l loc) path() string {
	if l.name == "" {
		return l.prefix
	}
	s := l.name
	if l.off >= 0 {
		s += "@" + strconv.FormatInt(l.off, 10)
	}
	if l.prefix != "" {
		s = l.prefix + " -> " + s
	}
	return s
}

func (l loc) child(name string, decode bool) loc {
	return l.childAt(name, -1, decode)
}

func (l loc) childAt(name string, off int64, decode bool) loc {
	c := loc{prefix: l.path(), name: name, off: off, depth: l.depth + 1, decodes: l.decodes, guess: l.guess || decode}
	if decode {
		c.decodes++
	}
	return c
}

// report passes a problem at at to the caller, unless at is a guess and
// the problem is not a bomb.
func (w *walker) report(at loc, err error) {
	if at.guess && !errors.Is(err, ErrBomb) {
		return
	}
	w.problem(at.where(), err)
}

// where names a part for a problem report.
func (l loc) where() string {
	if p := l.path(); p != "" {
		return p
	}
	return "the bytes as stored"
}

// sink returns the filter a stream's matches go through: UTF-16 pairs
// reported once, the container path set, repeated raw matches dropped.
func (w *walker) sink(at loc) *pairFilter {
	return &pairFilter{emit: func(x Match) {
		if at.dropRaw && x.Encoding == Raw {
			return
		}
		x.Container = at.path()
		w.emit(x)
	}}
}

// bytes scans data held in memory: a container at its start is opened
// (and, at the top or when its signature is weak, its bytes are scanned
// too), otherwise its bytes are matched and its base64/hex runs decoded.
func (w *walker) bytes(data []byte, at loc) {
	if k := sniff(data); k != notContainer {
		switch {
		case at.depth >= w.lim.MaxDepth:
			w.report(at, fmt.Errorf("%s: %w", k, ErrTooDeep))
		case w.open(k, bytes.NewReader(data), bytes.NewReader(data), int64(len(data)), at, false) && at.depth > 0 && !k.weak():
			return
		}
	}
	w.inBlocks(data, at)
}

// memBlock is how much of the bytes held in memory is matched and searched
// for runs at a time: little enough to stay in the CPU's cache between the
// two, so the bytes come from memory once.
const memBlock = 128 << 10

// inBlocks matches data and finds its runs block by block; a run still
// open at the end of a block waits for the next.
func (w *walker) inBlocks(data []byte, at loc) {
	p := w.sink(at)
	runFrom, open := 0, -1 // open: where a run open at the previous block's end starts
	for start, end := 0, 0; start < len(data); start = end {
		end = min(start+memBlock, len(data))
		w.m.find(data[:end], 0, start, p.add)
		cut := end
		if end < len(data) {
			lo := max(runFrom, start)
			cut = openRun(data, lo, end)
			if cut == start && open >= 0 {
				cut = open // the whole block goes on with the open run
			}
			open = -1
			if cut < end {
				open = cut
			}
		}
		w.runs(data[:cut], 0, runFrom, at)
		runFrom = max(runFrom, cut)
	}
	p.flush()
}

// member scans a stream nested in another (an archive member, a
// decompressed stream): a container at its start is opened in place of
// its bytes; with containersOnly (a plain member whose bytes the parent's
// scan already saw) anything else is left unread.
func (w *walker) member(rd io.Reader, at loc, containersOnly bool) {
	br := bufio.NewReaderSize(rd, sniffLen)
	head, _ := br.Peek(sniffLen)
	k := sniff(head)
	if k != notContainer && at.depth >= w.lim.MaxDepth {
		w.report(at, fmt.Errorf("%s: %w", k, ErrTooDeep))
		k = notContainer
	}
	switch {
	case k == notContainer && containersOnly:
		return
	case k == notContainer:
	case k == zipArchive || k.weak():
		// A zip is read at random, and a weak signature may be chance
		// (its bytes are scanned as well): hold it in memory, within the
		// bound.
		data, err := io.ReadAll(io.LimitReader(br, w.lim.MaxBuffer+1))
		if err != nil {
			w.report(at, fmt.Errorf("read %s: %w", k, err))
			return
		}
		if int64(len(data)) > w.lim.MaxBuffer {
			w.report(at, fmt.Errorf("%s over %d bytes nested in a stream: %w (its bytes are scanned as stored)", k, w.lim.MaxBuffer, ErrTooLarge))
			if !containersOnly {
				w.streamProblem(io.MultiReader(bytes.NewReader(data), br), at)
			}
			return
		}
		if containersOnly {
			w.open(k, bytes.NewReader(data), bytes.NewReader(data), int64(len(data)), at, false)
			return
		}
		w.bytes(data, at)
		return
	default:
		w.open(k, br, nil, 0, at, false)
		return
	}
	w.streamProblem(br, at)
}

func (w *walker) streamProblem(rd io.Reader, at loc) {
	if err := w.stream(rd, at); err != nil {
		w.report(at, err)
	}
}

// stream matches a stream chunk by chunk, holding one chunk plus the
// overlap a needle may span (and a base64/hex run still open at the end of
// a chunk, up to MaxRun) in memory, and decodes the runs it holds.
func (w *walker) stream(rd io.Reader, at loc) error {
	m := w.m
	p := w.sink(at)
	defer p.flush()
	overlap := max(m.maxLen-1, 0)
	buf := getBuf(overlap + w.chunk)
	defer func() { putBuf(buf) }()
	var base int64 // stream offset of buf[0]
	kept := 0      // bytes at the head of buf already matched
	runFrom := 0   // first byte of buf not yet looked at for runs
	for {
		if err := w.ctx.Err(); err != nil {
			return fmt.Errorf("stopped at offset %d: %w", base+int64(kept), err)
		}
		n, err := io.ReadFull(rd, buf[kept:])
		end := kept + n
		eof := err == io.EOF || err == io.ErrUnexpectedEOF
		if n > 0 {
			m.find(buf[:end], base, kept, p.add)
		}
		cut := end
		if !eof && err == nil {
			cut = openRun(buf, runFrom, end)
			if end-cut > w.lim.MaxRun {
				// Decode a long run in pieces whose lengths keep the
				// base64 (and hex) alignment of the next piece.
				cut += max(w.lim.MaxRun&^3, 4)
			}
		}
		w.runs(buf[:cut], base, runFrom, at)
		if eof {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read at offset %d: %w", base+int64(end), err)
		}
		from := min(max(end-overlap, 0), cut)
		carry := end - from
		if carry+w.chunk > len(buf) {
			grown := make([]byte, carry+w.chunk)
			copy(grown, buf[from:end])
			buf = grown // the deferred put keeps the larger one
		} else {
			copy(buf, buf[from:end])
		}
		base += int64(from)
		kept = carry
		runFrom = cut - from
	}
}

// streamBufs holds the buffers of finished streams. A check scans every
// changed file of every home after every phase, each file through a
// walker of its own, so a buffer of its own per file (a chunk, 256 KiB)
// was most of what a scan allocated.
var streamBufs sync.Pool // of *[]byte

// getBuf returns a buffer of n bytes, a finished stream's when one large
// enough is at hand. Its bytes are stale: a stream reads into it before
// it looks.
func getBuf(n int) []byte {
	if p, ok := streamBufs.Get().(*[]byte); ok && len(*p) >= n {
		return (*p)[:n]
	}
	return make([]byte, n)
}

// putBuf gives back a buffer getBuf returned, once nothing holds it.
func putBuf(b []byte) {
	b = b[:cap(b)]
	streamBufs.Put(&b)
}

// countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// bombReader stops a decompressed stream that grows past the limits.
type bombReader struct {
	r       io.Reader
	w       *walker
	in      func() int64 // compressed bytes consumed so far (for the ratio)
	expands bool         // its output counts against MaxTotal (decompression, not an archive's member)
	out     int64
}

func (b *bombReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.out += int64(n)
	if b.expands {
		b.w.total += int64(n)
	}
	lim := b.w.lim
	switch in := max(b.in(), 1); {
	case b.out > lim.MaxMember:
		return n, fmt.Errorf("%w: expands past %d bytes (from %d)", ErrBomb, lim.MaxMember, in)
	case b.w.total > lim.MaxTotal:
		return n, fmt.Errorf("%w: the file's containers expand past %d bytes in all", ErrBomb, lim.MaxTotal)
	case b.out > lim.RatioFloor && b.out > lim.MaxRatio*in:
		return n, fmt.Errorf("%w: %d bytes from %d, a ratio past %d", ErrBomb, b.out, in, lim.MaxRatio)
	}
	return n, err
}

func (w *walker) bomb(r io.Reader, in func() int64, expands bool) io.Reader {
	return &bombReader{r: r, w: w, in: in, expands: expands}
}
