// The reading role of a conn: who reads the stream, and how it is handed
// from reader to successor (leader/follower).

package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"
)

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
