package host

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

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

// wait returns once reading has stopped.
func (c *conn) wait() { c.wg.Wait() }

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
		return nil, notSentError{err}
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
		if c.broken() != nil {
			// The connection broke before or under the write (the host
			// died between being picked and being written to): at most a
			// torn frame went out.
			return nil, notSentError{err}
		}
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
