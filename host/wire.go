package host

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The wire protocol. Each side writes one JSON Frame per line; a frame is
// at most MaxFrame bytes (a larger one is refused by its sender, and breaks
// the connection if it ever arrives). The host's first frame is a hello
// notification {"op":"hello","body":{"protocol":1,"pid":N}}; the parent
// checks the version. Each side numbers its own requests (id); a reply
// names the request it answers (re) and carries body or err {code,
// message}. The parent asks: load, call, hook, provider, schema, extract;
// the host asks: loading (before each plugin, so the parent knows which one
// was loading if it dies), dispatch and facade, naming in parent the call
// they are nested in. Either side may send a cancel notification for a
// request it stopped waiting for. Requests carry timeout_ms; calls carry
// the session.

// ProtocolVersion is the wire protocol's version; the parent refuses a host
// whose hello names another.
const ProtocolVersion = 1

// DefaultMaxFrame is the default limit on one frame's size in bytes.
const DefaultMaxFrame = 4 << 20

// Sentinel errors. Every error a Manager returns names the plugin host and
// wraps one of these where one applies.
var (
	// ErrUnavailable: the plugin host is not running (it died, or it could
	// not start).
	ErrUnavailable = errors.New("plugin host unavailable")
	// ErrUnsupported: the boundary cannot carry what was asked.
	ErrUnsupported = errors.New("unsupported across the plugin host boundary")
	// ErrTimeout: the call's deadline passed before the plugin answered.
	ErrTimeout = errors.New("plugin host call timed out")
	// ErrPlugin: the plugin itself returned an error or panicked.
	ErrPlugin = errors.New("plugin error")
	// ErrNotFound: no such tool, hook or provider.
	ErrNotFound = errors.New("not found in the plugin host")
	// ErrStaleRef: a reference from an earlier host generation.
	ErrStaleRef = errors.New("stale plugin host reference")
	// ErrProtocol: the peer broke the wire protocol (a bad frame, a bad
	// hello, a wrong version).
	ErrProtocol = errors.New("plugin host protocol error")
	// ErrFrameTooLarge: a frame exceeds the size limit.
	ErrFrameTooLarge = errors.New("plugin host frame too large")
	// ErrBudgetExhausted: the host died too often and is not restarted.
	ErrBudgetExhausted = errors.New("plugin host restart budget exhausted")
	// ErrClosed: the manager was closed.
	ErrClosed = errors.New("plugin host manager closed")
)

// Code is a typed error's code on the wire.
type Code string

// The wire error codes.
const (
	CodeUnavailable Code = "unavailable"
	CodeUnsupported Code = "unsupported"
	CodeTimeout     Code = "timeout"
	CodePlugin      Code = "plugin"
	CodeNotFound    Code = "not_found"
	CodeStale       Code = "stale"
	CodeProtocol    Code = "protocol"
)

var codeErrs = map[Code]error{
	CodeUnavailable: ErrUnavailable, CodeUnsupported: ErrUnsupported, CodeTimeout: ErrTimeout,
	CodePlugin: ErrPlugin, CodeNotFound: ErrNotFound, CodeStale: ErrStaleRef, CodeProtocol: ErrProtocol,
}

// Error is a typed error that crossed the wire.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Message }

// Is matches the sentinel of e's code.
func (e *Error) Is(target error) bool { return codeErrs[e.Code] == target }

// wireError turns err into its wire form, keeping the code of a sentinel it
// wraps and calling anything else the plugin's own.
func wireError(err error) *Error {
	var we *Error
	if errors.As(err, &we) {
		return &Error{Code: we.Code, Message: err.Error()}
	}
	for code, s := range codeErrs {
		if errors.Is(err, s) {
			return &Error{Code: code, Message: err.Error()}
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Code: CodeTimeout, Message: err.Error()}
	}
	return &Error{Code: CodePlugin, Message: err.Error()}
}

// Ref names an object living in one host, fenced by that host's
// generation: a host refuses a Ref of another generation.
type Ref struct {
	Gen uint64 `json:"gen"`
	ID  uint64 `json:"id"`
}

// Frame is one line of the protocol. A request has ID (the sender's id
// space) and Op; its reply has Re (the request's ID) and Body or Err; a
// notification has Op and no ID.
type Frame struct {
	ID uint64 `json:"id,omitempty"`
	Re uint64 `json:"re,omitempty"`
	Op string `json:"op,omitempty"`
	// Parent, on a host's request, is the id of the parent's call it is
	// nested in: the parent runs it as that call's session.
	Parent    uint64          `json:"parent,omitempty"`
	Session   string          `json:"session,omitempty"`
	TimeoutMS int64           `json:"timeout_ms,omitempty"`
	Body      json.RawMessage `json:"body,omitempty"`
	Err       *Error          `json:"err,omitempty"`

	tok *readToken // the reading goroutine serving this request
}

// handoffDelay is how long a request may hold the reading goroutine
// before a successor takes over reading.
const handoffDelay = 500 * time.Microsecond

// readToken is held by a reading goroutine while it serves a request.
type readToken struct {
	c     *conn
	since atomic.Int64 // when it started (or resumed) serving, in ns
	state atomic.Int32
}

// The states of a readToken.
const (
	tokServing  = iota // serving the request, still owning the reading role
	tokHanded          // a successor reads; the server exits when done
	tokDone            // served; back to reading
	tokSelfRead        // a request made while serving reads its own reply
)

// handoff starts a successor reader unless the server is done already.
func (t *readToken) handoff() {
	if t != nil && t.state.CompareAndSwap(tokServing, tokHanded) {
		if t.c.leader {
			t.c.passRole()
			return
		}
		go t.c.readLoop()
	}
}

// resume gives the reading role back to the request being served, after a
// request it made read its own reply.
func (t *readToken) resume() {
	t.since.Store(time.Now().UnixNano())
	t.state.Store(tokServing)
	t.c.watch()
}

// watch arms the watchdog unless it is armed: one timer per conn, armed
// only while a request is served in place, rather than one per request (a
// timer added per request wakes an idle thread of the runtime each time).
func (c *conn) watch() {
	if c.wdArmed.CompareAndSwap(false, true) {
		c.wd.Reset(handoffDelay)
	}
}

// watchdog hands reading off from a request served in place for longer
// than handoffDelay, and re-arms itself while one is being served.
func (c *conn) watchdog() {
	for {
		next := time.Duration(-1)
		if t := c.serving.Load(); t != nil && t.state.Load() == tokServing {
			left := handoffDelay - time.Duration(time.Now().UnixNano()-t.since.Load())
			if left <= 0 {
				t.handoff()
			} else {
				next = left
			}
		}
		if next >= 0 {
			c.wd.Reset(next)
			return
		}
		c.wdArmed.Store(false)
		// A request may have started serving as we disarmed.
		if t := c.serving.Load(); t == nil || t.state.Load() != tokServing || !c.wdArmed.CompareAndSwap(false, true) {
			return
		}
	}
}

type readTokenKey struct{}

// withReadToken marks ctx as served by f's reading goroutine, so a request
// made under it hands reading off before it waits.
func withReadToken(ctx context.Context, f *Frame) context.Context {
	if f.tok == nil {
		return ctx
	}
	return context.WithValue(ctx, readTokenKey{}, f.tok)
}

type pending struct {
	ch      chan *Frame
	session string
	waiting bool // parked on ch, ready to take the reading role
}

// leadFrame, sent to a waiter, hands it the reading role.
var leadFrame = &Frame{}

// idleDelay is how long a leader conn's stream may go unread while no
// request is in flight before a background reader takes over (to notice a
// peer that dies while idle).
const idleDelay = time.Millisecond

// conn is one side of the protocol. Callers write their own frames (one
// write each, under a lock that waits no longer than their deadline), and
// the goroutine reading routes replies to their waiters; on a request it
// serves the request itself, handing reading to a successor if the request
// waits on the peer or takes longer than handoffDelay, so a call costs no
// goroutine hand-off on the serving side. On a leader conn (the parent's)
// a caller also reads its own reply when nobody else is reading (see lead),
// so a call costs no hand-off on the calling side either.
type conn struct {
	name     string
	br       *bufio.Reader
	w        io.Writer
	closeW   func() error
	setDL    func(time.Time) error
	maxFrame int
	handle   func(*Frame)
	// readEnd is called once when reading stops; nil means fail(err).
	readEnd func(error)
	// afterFail, if set, runs once after the connection breaks.
	afterFail func()
	// selfRead lets a request made while serving read its own reply (see
	// readForReply). Only for a side whose peer bounds every wait.
	selfRead bool
	// leader conns (a reader with deadlines) let a requester read its own
	// reply: one goroutine at a time holds the reading role, delivers the
	// replies of others, serves the peer's requests, and passes the role
	// on to a waiting requester when its own reply comes (see lead).
	leader bool
	setRDL func(time.Time) error
	carry  []byte      // a frame's start, read before a deadline cut in (role holder only)
	idle   *time.Timer // starts a background reader once the stream is idle
	// rawW, when the writing side is a pollable file, writes a frame
	// without a deadline when the pipe has room for it.
	rawW syscall.RawConn

	wsem   chan struct{}
	nextID atomic.Uint64

	serving atomic.Pointer[readToken] // the request served in place, innermost
	wd      *time.Timer               // the watchdog (see watch)
	wdArmed atomic.Bool

	mu       sync.Mutex
	pending  map[uint64]*pending
	err      error
	done     chan struct{}
	roleHeld bool // leader conns: some goroutine holds the reading role
	// idleSince is when the role was last given up to nobody; idleArmed
	// says the idle timer will look at it.
	idleSince time.Time
	idleArmed bool
	ended     bool // reading has stopped for good

	wg sync.WaitGroup // the reading role, passed from reader to successor
}

func newConn(name string, r io.Reader, w io.Writer, maxFrame int, handle func(*Frame)) *conn {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(r, 64<<10)
	}
	c := &conn{
		name: name, br: br, w: w, maxFrame: maxFrame, handle: handle,
		wsem: make(chan struct{}, 1), pending: map[uint64]*pending{}, done: make(chan struct{}),
	}
	if cl, ok := w.(io.Closer); ok {
		c.closeW = cl.Close
	}
	c.wd = time.AfterFunc(time.Hour, c.watchdog)
	c.wd.Stop()
	if d, ok := w.(interface{ SetWriteDeadline(time.Time) error }); ok && d.SetWriteDeadline(time.Time{}) == nil {
		c.setDL = d.SetWriteDeadline
		if sc, ok := w.(interface {
			SyscallConn() (syscall.RawConn, error)
		}); ok {
			c.rawW, _ = sc.SyscallConn()
		}
	}
	return c
}

// useLeader makes c a leader conn; r is the stream c reads, and must
// support read deadlines.
func (c *conn) useLeader(setReadDeadline func(time.Time) error) {
	c.leader = true
	c.setRDL = setReadDeadline
}

func (c *conn) start() {
	c.wg.Add(1)
	if c.leader {
		c.idle = time.AfterFunc(time.Hour, c.idleRead)
		c.idle.Stop()
		c.roleHeld = true
	}
	go c.readLoop()
}

// idleRead takes the free reading role when the stream has been idle for
// idleDelay. The timer is armed once per idle spell, not once per call (a
// timer reset per call wakes an idle runtime thread each time).
func (c *conn) idleRead() {
	c.mu.Lock()
	if c.roleHeld || c.ended {
		c.idleArmed = false // whoever holds the role re-arms it on release
		c.mu.Unlock()
		return
	}
	if left := idleDelay - time.Since(c.idleSince); left > 0 {
		c.idle.Reset(left)
		c.mu.Unlock()
		return
	}
	c.idleArmed = false
	c.roleHeld = true
	c.mu.Unlock()
	c.readLoop()
}

// passRole hands the reading role to a waiting requester, or to a new
// background reader: the stream must be read.
func (c *conn) passRole() {
	c.mu.Lock()
	c.passLocked(true)
	c.mu.Unlock()
}

// releaseRole gives the reading role up: to a waiting requester, or to a
// background reader if the connection broke (to read to its end), or to
// nobody (the idle timer then starts a background reader).
func (c *conn) releaseRole() {
	c.mu.Lock()
	c.passLocked(false)
	c.mu.Unlock()
}

func (c *conn) passLocked(mustRead bool) {
	if c.ended {
		return
	}
	for _, p := range c.pending {
		if p.waiting {
			p.waiting = false
			p.ch <- leadFrame // room: a pending waiter has had no reply
			return
		}
	}
	if mustRead || c.err != nil {
		go c.readLoop()
		return
	}
	c.roleHeld = false
	c.idleSince = time.Now()
	if !c.idleArmed {
		c.idleArmed = true
		c.idle.Reset(idleDelay)
	}
}

// claimLocked takes the free reading role for the requester of id, or
// marks it waiting for its reply or the role. A reply delivered already
// waits in p.ch.
func (c *conn) claimLocked(id uint64, p *pending) bool {
	if _, ok := c.pending[id]; !ok {
		return false
	}
	if !c.roleHeld && !c.ended && c.err == nil {
		c.roleHeld = true
		return true
	}
	p.waiting = true
	return false
}

// abandon forgets request id, passing the reading role on if it had just
// been handed to p.
func (c *conn) abandon(id uint64, p *pending) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pending, id)
	p.waiting = false
	select {
	case r := <-p.ch:
		if r == leadFrame {
			c.passLocked(false)
		}
	default:
	}
}

// wait returns once reading has stopped.
func (c *conn) wait() { c.wg.Wait() }

// readFrame reads one line of at most max bytes (newline excluded).
func readFrame(br *bufio.Reader, max int) ([]byte, error) {
	return readFrameCarry(br, max, nil)
}

// readFrameCarry is readFrame keeping, in *carry, what it read of a frame
// before a read deadline cut in, and starting from it next time.
func readFrameCarry(br *bufio.Reader, max int, carry *[]byte) ([]byte, error) {
	var buf []byte
	if carry != nil && len(*carry) > 0 {
		buf, *carry = *carry, nil
	}
	for {
		line, err := br.ReadSlice('\n')
		if len(buf)+len(line) > max+1 {
			return nil, fmt.Errorf("read a frame of more than %d bytes: %w", max, ErrFrameTooLarge)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			buf = append(buf, line...)
			continue
		}
		if err != nil {
			if carry != nil && errors.Is(err, os.ErrDeadlineExceeded) {
				*carry = append(buf, line...)
			}
			return nil, err
		}
		if buf == nil {
			return line, nil
		}
		return append(buf, line...), nil
	}
}

// readOne reads and decodes one frame. On a leader conn a read deadline
// set for another holder of the reading role is cleared and the read
// retried; one set for ctx ends it with os.ErrDeadlineExceeded.
func (c *conn) readOne(ctx context.Context) (*Frame, error) {
	var line []byte
	var err error
	if !c.leader {
		line, err = readFrame(c.br, c.maxFrame)
	} else {
		for {
			line, err = readFrameCarry(c.br, c.maxFrame, &c.carry)
			if !errors.Is(err, os.ErrDeadlineExceeded) || (ctx != nil && ctx.Err() != nil) {
				break
			}
			_ = c.setRDL(time.Time{})
		}
	}
	if err != nil {
		return nil, err
	}
	f := new(Frame)
	if decodeFrame(line, f) {
		return f, nil
	}
	*f = Frame{}
	if err := json.Unmarshal(line, f); err != nil {
		return nil, fmt.Errorf("decode frame %.80q: %v: %w", line, err, ErrProtocol)
	}
	return f, nil
}

// decodeFrame decodes a frame as appendFrame writes it (no whitespace,
// plain ASCII strings, no err) without reflection. It reports false for
// anything else, which json.Unmarshal then decodes or refuses.
func decodeFrame(line []byte, f *Frame) bool {
	line = bytes.TrimSuffix(line, []byte{'\n'})
	if len(line) < 2 || line[0] != '{' || line[len(line)-1] != '}' {
		return false
	}
	i := 1
	if line[i] == '}' {
		return i == len(line)-1
	}
	for {
		k, next, ok := plainString(line, i)
		if !ok || next >= len(line) || line[next] != ':' {
			return false
		}
		i = next + 1
		switch k {
		case "id", "re", "parent":
			n, next, ok := plainUint(line, i)
			if !ok {
				return false
			}
			switch k {
			case "id":
				f.ID = n
			case "re":
				f.Re = n
			default:
				f.Parent = n
			}
			i = next
		case "timeout_ms":
			neg := i < len(line) && line[i] == '-'
			if neg {
				i++
			}
			n, next, ok := plainUint(line, i)
			if !ok || n > math.MaxInt64 {
				return false
			}
			f.TimeoutMS = int64(n)
			if neg {
				f.TimeoutMS = -f.TimeoutMS
			}
			i = next
		case "op", "session":
			v, next, ok := plainString(line, i)
			if !ok {
				return false
			}
			if k == "op" {
				f.Op = v
			} else {
				f.Session = v
			}
			i = next
		case "body":
			end, ok := skipValue(line, i)
			if !ok || !json.Valid(line[i:end]) {
				return false
			}
			f.Body = append(json.RawMessage(nil), line[i:end]...)
			i = end
		default:
			return false
		}
		if i >= len(line) {
			return false
		}
		switch line[i] {
		case ',':
			i++
		case '}':
			return i == len(line)-1
		default:
			return false
		}
	}
}

// plainString reads a JSON string at b[i] made of printable ASCII with no
// escapes.
func plainString(b []byte, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return string(b[i+1 : j]), j + 1, true
		case c < 0x20 || c >= 0x80 || c == '\\':
			return "", 0, false
		}
	}
	return "", 0, false
}

// plainUint reads an unsigned JSON integer at b[i].
func plainUint(b []byte, i int) (uint64, int, bool) {
	j := i
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	if j == i || (b[i] == '0' && j > i+1) || (j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E')) {
		return 0, 0, false
	}
	n, err := strconv.ParseUint(string(b[i:j]), 10, 64)
	return n, j, err == nil
}

// skipValue finds the end of the JSON value starting at b[i] (its syntax is
// checked by the caller).
func skipValue(b []byte, i int) (int, bool) {
	depth := 0
	for j := i; j < len(b); j++ {
		switch b[j] {
		case '"':
			j++
			for j < len(b) && b[j] != '"' {
				if b[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(b) {
				return 0, false
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth < 0 {
				return j, j > i
			}
		case ',':
			if depth == 0 {
				return j, j > i
			}
		}
		if depth == 0 && (b[j] == '"' || b[j] == '}' || b[j] == ']') {
			return j + 1, true
		}
	}
	return 0, false
}

// deliver hands a reply to its waiter.
func (c *conn) deliver(f *Frame) {
	c.mu.Lock()
	p := c.pending[f.Re]
	delete(c.pending, f.Re)
	c.mu.Unlock()
	if p != nil {
		p.ch <- f
		// Let the waiter run now: the next read may block this thread in
		// a syscall with the waiter queued behind it.
		runtime.Gosched()
	}
}

// end finishes the reading role when the stream ends.
func (c *conn) end(err error) {
	c.mu.Lock()
	c.ended = true
	c.mu.Unlock()
	if c.idle != nil {
		c.idle.Stop()
	}
	if c.readEnd != nil {
		c.readEnd(err)
	} else {
		c.fail(err)
	}
	c.wg.Done()
}

// readLoop holds the reading role with no request of its own waiting. On
// a leader conn it gives the role up once no request is in flight.
func (c *conn) readLoop() {
	for {
		f, err := c.readOne(nil)
		if err != nil {
			c.end(err)
			return
		}
		if f.Re != 0 {
			c.deliver(f)
		} else if !c.serveInPlace(f) {
			return // the successor holds the reading role (and its wg count)
		}
		if c.leader {
			c.mu.Lock()
			if c.err == nil && len(c.pending) == 0 {
				c.passLocked(false)
				c.mu.Unlock()
				return
			}
			c.mu.Unlock()
		}
	}
}

// serveInPlace serves a request or notification on the goroutine holding
// the reading role (no hand-off, the fast path), which hands reading to a
// successor when the handler waits on the peer, or after handoffDelay, so
// a handler may block or call back for as long as it likes. It reports
// whether this goroutine still holds the role.
func (c *conn) serveInPlace(f *Frame) bool {
	if f.ID == 0 {
		c.handle(f) // a notification (cancel): quick
		return true
	}
	tok := &readToken{c: c}
	tok.since.Store(time.Now().UnixNano())
	f.tok = tok
	prev := c.serving.Swap(tok)
	c.watch()
	c.handle(f)
	c.serving.CompareAndSwap(tok, prev)
	return tok.state.CompareAndSwap(tokServing, tokDone)
}

// lead reads the stream, holding the reading role, until the reply to id
// comes, delivering others' replies and serving the peer's requests on the
// way; then it passes the role on (or, with tok, back to the request being
// served whose handler made this one). A deadline on the read bounds the
// wait by ctx.
func (c *conn) lead(ctx context.Context, id uint64, p *pending, tok *readToken) (json.RawMessage, error) {
	stop := context.AfterFunc(ctx, func() { _ = c.setRDL(time.Unix(1, 0)) })
	defer stop()
	giveBack := func() {
		if tok != nil {
			tok.resume()
		} else {
			c.releaseRole()
		}
	}
	for {
		f, err := c.readOne(ctx)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				_ = c.setRDL(time.Time{})
				c.abandon(id, p)
				giveBack()
				return nil, c.stopped(ctx, id)
			}
			if tok != nil {
				tok.state.Store(tokHanded) // the role ends here
			}
			c.end(err)
			select {
			case <-c.done:
				return nil, c.broken()
			case <-ctx.Done():
				return nil, c.stopped(ctx, id)
			}
		}
		switch {
		case f.Re == id:
			return c.ownReply(id, f, giveBack)
		case f.Re != 0:
			c.deliver(f)
		default:
			if !c.serveInPlace(f) {
				// The role went to a successor while serving.
				if tok != nil {
					tok.state.Store(tokHanded)
				}
				return c.await(ctx, id, p)
			}
		}
	}
}

// await waits for the reply to id, sent already: it takes the reading
// role if it is free (leader conns), or waits to be given the reply or
// the role.
func (c *conn) await(ctx context.Context, id uint64, p *pending) (json.RawMessage, error) {
	if c.leader {
		c.mu.Lock()
		lead := c.claimLocked(id, p)
		c.mu.Unlock()
		if lead {
			return c.lead(ctx, id, p, nil)
		}
	}
	select {
	case r := <-p.ch:
		if r == leadFrame {
			return c.lead(ctx, id, p, nil)
		}
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Body, nil
	case <-c.done:
		c.abandon(id, p)
		return nil, c.broken()
	case <-ctx.Done():
		c.abandon(id, p)
		return nil, c.stopped(ctx, id)
	}
}

// ownReply ends the wait of the goroutine reading for request id, whose
// reply f has come: it forgets the request, passes the reading role on
// with release, and returns the reply's body or error.
func (c *conn) ownReply(id uint64, f *Frame, release func()) (json.RawMessage, error) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
	release()
	if f.Err != nil {
		return nil, f.Err
	}
	return f.Body, nil
}

// stopped tells the peer we stopped waiting on request id, and is the
// error for it.
func (c *conn) stopped(ctx context.Context, id uint64) error {
	cctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = c.send(cctx, &Frame{Op: opCancel, Body: mustJSON(cancelBody{ID: id})})
	cancel()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w (%v)", ErrTimeout, ctx.Err())
	}
	return ctx.Err()
}

// readForReply is request's wait when the requesting goroutine holds the
// reading role (selfRead conns): it reads the stream itself until its reply
// comes, delivering other replies and serving notifications in place and
// requests in goroutines of their own, then resumes serving. The peer ends
// the wait in time: a reply carries the request's deadline, and the parent
// cancels what it stops waiting for.
func (c *conn) readForReply(ctx context.Context, id uint64, tok *readToken) (json.RawMessage, error) {
	resume := tok.resume
	for {
		if err := ctx.Err(); err != nil {
			c.mu.Lock()
			delete(c.pending, id)
			c.mu.Unlock()
			resume()
			return nil, fmt.Errorf("%w (%v)", ErrTimeout, err)
		}
		f, err := c.readOne(nil)
		if err != nil {
			tok.state.Store(tokHanded) // the role ends here
			c.end(err)
			return nil, c.broken()
		}
		switch {
		case f.Re == id:
			return c.ownReply(id, f, resume)
		case f.Re != 0:
			c.deliver(f)
		case f.ID == 0:
			c.handle(f) // a notification (cancel): quick, and it may be ours
		default:
			go c.handle(f)
		}
	}
}

// fail breaks the connection with err and closes the writing side; every
// waiter gets err. Only the first call counts.
func (c *conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = fmt.Errorf("%s closed the connection: %w", c.name, ErrUnavailable)
	}
	c.err = err
	close(c.done)
	if c.leader && !c.roleHeld && !c.ended {
		// Nobody reads: read the stream to its end.
		c.roleHeld = true
		go c.readLoop()
	}
	c.mu.Unlock()
	if c.closeW != nil {
		_ = c.closeW()
	}
	if c.afterFail != nil {
		c.afterFail()
	}
}

func (c *conn) broken() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// send writes one frame, waiting for the write lock no longer than ctx
// allows. A write that cannot finish by ctx's deadline (the peer stopped
// reading) leaves a torn frame, so it breaks the connection.
func (c *conn) send(ctx context.Context, f *Frame) error {
	b := appendFrame(make([]byte, 0, 128+len(f.Body)), f)
	if len(b) > c.maxFrame {
		return fmt.Errorf("send a %q frame of %d bytes (limit %d): %w", f.Op, len(b), c.maxFrame, ErrFrameTooLarge)
	}
	b = append(b, '\n')
	select {
	case c.wsem <- struct{}{}:
	case <-c.done:
		return c.broken()
	case <-ctx.Done():
		return fmt.Errorf("write to %s: %w (%v)", c.name, ErrTimeout, ctx.Err())
	}
	defer func() { <-c.wsem }()
	if err := c.broken(); err != nil {
		return err
	}
	if c.rawW != nil {
		// Most frames fit in the pipe at once: write without setting a
		// deadline (setting one per frame wakes an idle runtime thread).
		n, err := c.tryWrite(b)
		if err != nil {
			c.fail(fmt.Errorf("write to %s: %v: %w", c.name, err, ErrUnavailable))
			return c.broken()
		}
		if b = b[n:]; len(b) == 0 {
			return nil
		}
	}
	if c.setDL != nil {
		dl, _ := ctx.Deadline()
		_ = c.setDL(dl)
		if c.rawW != nil {
			defer func() { _ = c.setDL(time.Time{}) }()
		}
	}
	if _, err := c.w.Write(b); err != nil {
		c.fail(fmt.Errorf("write to %s: %v: %w", c.name, err, ErrUnavailable))
		return c.broken()
	}
	return nil
}

// tryWrite writes what of b the pipe takes now, without waiting.
func (c *conn) tryWrite(b []byte) (int, error) {
	n := 0
	var werr error
	err := c.rawW.Write(func(fd uintptr) bool {
		for n < len(b) {
			m, e := syscall.Write(int(fd), b[n:])
			if m > 0 {
				n += m
			}
			switch {
			case e == syscall.EINTR:
				continue
			case e == syscall.EAGAIN || (e == nil && m <= 0):
				return true
			case e != nil:
				werr = e
				return true
			}
		}
		return true
	})
	if werr == nil {
		werr = err
	}
	return n, werr
}

// request sends f as a request and waits for its reply. session is kept
// with the request so nested calls from the peer can run as it.
func (c *conn) request(ctx context.Context, f *Frame, session string) (json.RawMessage, error) {
	id := c.nextID.Add(1)
	f.ID = id
	p := &pending{ch: make(chan *Frame, 1), session: session}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.pending[id] = p
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}
	if err := c.send(ctx, f); err != nil {
		forget()
		return nil, err
	}
	// The reply may need the very goroutine that is serving us: read it
	// ourselves, or let a successor read.
	if tok, _ := ctx.Value(readTokenKey{}).(*readToken); tok != nil && tok.c == c {
		if c.leader && tok.state.CompareAndSwap(tokServing, tokSelfRead) {
			return c.lead(ctx, id, p, tok)
		}
		if c.selfRead && tok.state.CompareAndSwap(tokServing, tokSelfRead) {
			return c.readForReply(ctx, id, tok)
		}
		tok.handoff()
	}
	return c.await(ctx, id, p)
}

// sessionOf is the session of an outstanding request of ours.
func (c *conn) sessionOf(id uint64) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pending[id]
	if !ok {
		return "", false
	}
	return p.session, true
}

func (c *conn) reply(ctx context.Context, re uint64, body any, err error) {
	r := &Frame{Re: re}
	if err != nil {
		r.Err = wireError(err)
	} else if body != nil {
		b, merr := encodeBody(body)
		if merr != nil {
			r.Err = &Error{Code: CodePlugin, Message: "encode reply: " + merr.Error()}
		} else {
			r.Body = b
		}
	}
	// A reply waits for the write lock no longer than the call's deadline.
	if serr := c.send(ctx, r); errors.Is(serr, ErrFrameTooLarge) {
		_ = c.send(ctx, &Frame{Re: re, Err: &Error{Code: CodeUnsupported, Message: fmt.Sprintf("reply over the frame limit of %d bytes", c.maxFrame)}})
	}
}

// appendFrame appends f's JSON encoding (what json.Marshal gives, without
// its reflection): f.Body must be valid, compact JSON, as json.Marshal
// writes it.
func appendFrame(b []byte, f *Frame) []byte {
	b = append(b, '{')
	n := len(b)
	key := func(k string) {
		if len(b) > n {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, k...)
		b = append(b, '"', ':')
	}
	if f.ID != 0 {
		key("id")
		b = strconv.AppendUint(b, f.ID, 10)
	}
	if f.Re != 0 {
		key("re")
		b = strconv.AppendUint(b, f.Re, 10)
	}
	if f.Op != "" {
		key("op")
		b = appendString(b, f.Op)
	}
	if f.Parent != 0 {
		key("parent")
		b = strconv.AppendUint(b, f.Parent, 10)
	}
	if f.Session != "" {
		key("session")
		b = appendString(b, f.Session)
	}
	if f.TimeoutMS != 0 {
		key("timeout_ms")
		b = strconv.AppendInt(b, f.TimeoutMS, 10)
	}
	if len(f.Body) != 0 {
		key("body")
		b = append(b, f.Body...)
	}
	if f.Err != nil {
		key("err")
		b = append(b, `{"code":`...)
		b = appendString(b, string(f.Err.Code))
		b = append(b, `,"message":`...)
		b = appendString(b, f.Err.Message)
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendString appends s as a JSON string: plain ASCII directly, anything
// else through encoding/json.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// encodeBody is json.Marshal(v), without reflection for the bodies every
// call carries: a result, a tool call with no arguments.
func encodeBody(v any) ([]byte, error) {
	switch b := v.(type) {
	case resultBody:
		return append(appendString([]byte(`{"result":`), b.Result), '}'), nil
	case callBody:
		if b.Args == nil {
			return append(appendString([]byte(`{"tool":`), b.Tool), `,"args":null}`...), nil
		}
	}
	return json.Marshal(v)
}

// decodeBody is json.Unmarshal(raw, v), without reflection for the bodies
// encodeBody writes that way.
func decodeBody(raw []byte, v any) error {
	switch b := v.(type) {
	case *resultBody:
		if s, ok := plainObject(raw, `{"result":`, `}`); ok {
			b.Result = s
			return nil
		}
	case *callBody:
		if s, ok := plainObject(raw, `{"tool":`, `,"args":null}`); ok {
			b.Tool, b.Args = s, nil
			return nil
		}
	}
	return json.Unmarshal(raw, v)
}

// plainObject reads prefix, a plain string (see plainString), suffix: all
// of raw.
func plainObject(raw []byte, prefix, suffix string) (string, bool) {
	if !bytes.HasPrefix(raw, []byte(prefix)) {
		return "", false
	}
	s, next, ok := plainString(raw, len(prefix))
	if !ok || string(raw[next:]) != suffix {
		return "", false
	}
	return s, true
}

func mustJSON(v any) json.RawMessage {
	b, err := encodeBody(v)
	if err != nil {
		panic(fmt.Sprintf("host: encode %T: %v", v, err))
	}
	return b
}

// Operations on the wire.
const (
	opHello    = "hello"    // host -> parent notification, first frame
	opLoad     = "load"     // parent -> host: load plugins
	opLoading  = "loading"  // host -> parent: about to load one plugin
	opCall     = "call"     // parent -> host: run a tool
	opHook     = "hook"     // parent -> host: run one hook
	opProvider = "provider" // parent -> host: call a provider object's method
	opSchema   = "schema"   // parent -> host: run a plugin's config schema
	opExtract  = "extract"  // parent -> one-shot host: model-provider profile data
	opDispatch = "dispatch" // host -> parent: DispatchTool
	opFacade   = "facade"   // host -> parent: State() / LLM() calls
	opCancel   = "cancel"   // either way notification: stop waiting on a request
)

type helloBody struct {
	Protocol int `json:"protocol"`
	PID      int `json:"pid"`
}

type cancelBody struct {
	ID uint64 `json:"id"`
}
