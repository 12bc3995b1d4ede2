package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/internal/syncio"
)

// ErrClosed is returned by calls and waits on a connection that has closed.
var ErrClosed = errors.New("rpc connection closed")

// RPCError is an error reply of the tenant-server protocol.
type RPCError struct {
	Method  string
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *RPCError) Error() string {
	return fmt.Sprintf("%s: rpc error %d: %s", e.Method, e.Code, e.Message)
}

// Frame is one JSON object the server sent, exactly as received.
type Frame struct {
	Raw  []byte    // the frame's bytes
	Time time.Time // when it arrived
}

// Event is a decoded `event` notification.
type Event struct {
	Index     int            // position among this connection's events
	Type      string         // message.start, message.delta, tool.start, tool.complete, message.complete, error, gateway.ready, ...
	SessionID string         // "" for events outside a session
	Payload   map[string]any // the event's payload
	Raw       []byte         // the frame it came in
}

// wireMsg is any frame of JSON-RPC 2.0, request, reply or notification.
type wireMsg struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *RPCError       `json:"error,omitempty"`
}

// inbound is a received frame as the connection's wire format reads it:
// a reply (to the call of id), an event, or neither.
type inbound struct {
	reply  bool
	id     int64
	result json.RawMessage
	err    *RPCError
	event  *Event // Type, SessionID and Payload set
}

// codec is a wire format of one JSON object a message: JSON-RPC 2.0, or a
// framed transport's envelope (framed.go).
type codec interface {
	encode(id int64, method string, params any) ([]byte, error)
	// decode reads a frame that is valid JSON; an error is a frame that
	// is not a JSON object.
	decode(raw []byte) (inbound, error)
}

// jsonrpc is DESIGN.md's wire format.
type jsonrpc struct{}

func (jsonrpc) encode(id int64, method string, params any) ([]byte, error) {
	return json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

func (jsonrpc) decode(raw []byte) (inbound, error) {
	var m wireMsg
	if err := json.Unmarshal(raw, &m); err != nil {
		return inbound{}, err
	}
	if m.Method == "event" {
		var p struct {
			Type      string         `json:"type"`
			SessionID string         `json:"session_id"`
			Payload   map[string]any `json:"payload"`
		}
		_ = json.Unmarshal(m.Params, &p)
		return inbound{event: &Event{Type: p.Type, SessionID: p.SessionID, Payload: p.Payload}}, nil
	}
	var id int64
	if json.Unmarshal(m.ID, &id) != nil {
		return inbound{}, nil
	}
	return inbound{reply: true, id: id, result: m.Result, err: m.Error}, nil
}

// RPC is a client of the tenant-server protocol over any transport that
// moves one JSON object per message (JSON-RPC 2.0, or a framed envelope),
// or over an HTTP chat: it matches replies to calls by id (they may come
// out of order), queues events for waiters, and keeps every frame received
// so the RPC-frame scan sees all of them.
type RPC struct {
	name string
	send func([]byte) error

	mu      sync.Mutex
	cond    *sync.Cond
	nextID  int64
	pending map[int64]chan inbound
	posted  map[int64]func(error) // Post's requests, by id
	frames  []Frame
	events  []Event
	bad     []string // frames that were not JSON objects
	closed  error

	dialect *Dialect   // with defaults; nil speaks DESIGN.md word for word
	hooks   HookRunner // runs a dialect's hook commands

	wire      codec       // the wire format (JSON-RPC 2.0 by default)
	speaks    Transport   // the transport dialed
	transport *Transport  // the transport WithTransport chose; nil: the dialect's first
	chat      *chatClient // a chat transport's client: calls go over HTTP
}

func newRPC(name string, send func([]byte) error) *RPC {
	c := &RPC{name: name, send: send, pending: map[int64]chan inbound{}, posted: map[int64]func(error){}, wire: jsonrpc{}, speaks: Transport{}.WithDefaults()}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// deliver takes one received frame.
func (c *RPC) deliver(raw []byte) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return
	}
	frame := Frame{Raw: append([]byte(nil), raw...), Time: time.Now()}
	m, err := c.wire.decode(frame.Raw)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frames = append(c.frames, frame)
	defer c.cond.Broadcast()
	if err != nil {
		c.bad = append(c.bad, truncate(string(raw), 200))
		return
	}
	if e := m.event; e != nil {
		e.Index, e.Raw = len(c.events), frame.Raw
		c.events = append(c.events, *e)
		return
	}
	if m.reply {
		if ch, ok := c.pending[m.id]; ok {
			delete(c.pending, m.id)
			ch <- m
		} else if done, ok := c.posted[m.id]; ok {
			delete(c.posted, m.id)
			if m.err != nil {
				done(m.err)
			} else {
				done(nil)
			}
		}
	}
}

// record keeps a frame the connection's transport received outside
// deliver (a chat stream's data), with the event it carries, if any.
func (c *RPC) record(raw []byte, e *Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.cond.Broadcast()
	if len(raw) > 0 {
		c.frames = append(c.frames, Frame{Raw: append([]byte(nil), raw...), Time: time.Now()})
	}
	if e != nil {
		e.Index = len(c.events)
		if e.Raw == nil {
			e.Raw = raw
		}
		c.events = append(c.events, *e)
	}
}

// fail closes the connection for every caller and waiter with err.
func (c *RPC) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed == nil {
		c.closed = fmt.Errorf("%s: %w: %v", c.name, ErrClosed, err)
	}
	for id, ch := range c.pending {
		close(ch)
		delete(c.pending, id)
	}
	for id, done := range c.posted {
		delete(c.posted, id)
		done(c.closed)
	}
	c.cond.Broadcast()
}

// Call sends a request and waits for its reply; a non-nil result is decoded
// from the reply's result. An error reply is an *RPCError. method is a
// logical operation: a target's dialect maps it (and its params and
// result) to the server's, or runs a hook, or answers *UnsupportedError.
func (c *RPC) Call(ctx context.Context, method string, params any, result any) error {
	return c.callAs(ctx, 0, method, params, result)
}

// ErrIDInFlight is CallWithID's error for an id a request of the
// connection still waits on.
var ErrIDInFlight = errors.New("request id in flight")

// CallWithID is Call with a request id the caller chooses (id > 0), so
// that several connections can send byte-identical requests, ids included,
// or one connection can send an id again once its reply came (a replay).
// The connection's own ids skip an id in flight. A dialect's hook and a
// chat transport have no request id: they answer *UnsupportedError.
func (c *RPC) CallWithID(ctx context.Context, id int64, method string, params any, result any) error {
	if id <= 0 {
		return fmt.Errorf("%s: %s: request id %d: want one above 0", c.name, method, id)
	}
	if c.chat != nil {
		return &UnsupportedError{Op: method, Reason: "a chat transport answers each request on its own HTTP exchange, with no request id"}
	}
	return c.callAs(ctx, id, method, params, result)
}

// callAs is Call with request id id (0: the connection's next).
func (c *RPC) callAs(ctx context.Context, id int64, method string, params any, result any) error {
	if c.dialect != nil {
		return c.callDialect(ctx, id, method, params, result)
	}
	return c.call(ctx, id, method, params, result)
}

// Post sends a request and returns without waiting for its reply: done
// gets the reply's outcome (nil, an *RPCError, or the connection's end)
// on the goroutine that reads the connection, with the connection's lock
// held, so it must return at once and not call the connection. method is
// a logical operation, mapped by the dialect as Call maps it; one the
// dialect runs as a hook, or declares unsupported, cannot be posted, nor
// can anything over a chat transport, which answers a request on its own
// HTTP exchange. A flood keeps many requests in flight this way, with no
// goroutine waiting on each.
func (c *RPC) Post(method string, params any, done func(error)) error {
	if c.dialect != nil {
		if c.chat != nil {
			return &UnsupportedError{Op: method, Reason: "a chat transport answers a request on its own HTTP exchange: nothing to post"}
		}
		if key, spec, mapped := c.dialect.spec(method, params); mapped {
			logical, spec, err := forCall(key, spec, params)
			if err != nil {
				return err
			}
			if len(spec.Hook) > 0 {
				return &UnsupportedError{Op: key, Reason: "the target runs it as a hook, which cannot be posted"}
			}
			method, params = spec.Method, spec.wireParams(logical, c.dialect.LaunchAgent)
		}
	}
	_, err := c.start(0, method, params, func(id int64) { c.posted[id] = done })
	return err
}

// start sends a request on the wire, registered by pend (under the
// connection's lock) before it is sent; it returns the request's id: id,
// or the connection's next when id is 0.
func (c *RPC) start(id int64, method string, params any, pend func(id int64)) (int64, error) {
	c.mu.Lock()
	if c.closed != nil {
		c.mu.Unlock()
		return 0, c.closed
	}
	switch {
	case id == 0:
		id = c.nextFreeID()
	case c.inFlight(id):
		c.mu.Unlock()
		return 0, fmt.Errorf("%s: %s: %w: %d", c.name, method, ErrIDInFlight, id)
	}
	pend(id)
	c.mu.Unlock()
	frame, err := c.wire.encode(id, method, params)
	if err != nil {
		c.forget(id)
		return id, fmt.Errorf("%s: encode %s: %w", c.name, method, err)
	}
	if err := c.send(frame); err != nil {
		c.forget(id)
		return id, fmt.Errorf("%s: send %s: %w", c.name, method, err)
	}
	return id, nil
}

// nextFreeID is the connection's next request id that no request (one
// of CallWithID's) has in flight; c.mu is held.
func (c *RPC) nextFreeID() int64 {
	for {
		c.nextID++
		if !c.inFlight(c.nextID) {
			return c.nextID
		}
	}
}

// inFlight reports whether a request of id waits for its reply; c.mu is
// held.
func (c *RPC) inFlight(id int64) bool {
	_, pending := c.pending[id]
	_, posted := c.posted[id]
	return pending || posted
}

// call is Call on the wire, with no dialect, as request id (0: the
// connection's next).
func (c *RPC) call(ctx context.Context, id int64, method string, params any, result any) error {
	ch := make(chan inbound, 1)
	id, err := c.start(id, method, params, func(id int64) { c.pending[id] = ch })
	if err != nil {
		return err
	}
	select {
	case m, ok := <-ch:
		if !ok {
			c.mu.Lock()
			defer c.mu.Unlock()
			return fmt.Errorf("%s waiting for its reply: %w", method, c.closed)
		}
		if m.err != nil {
			m.err.Method = method
			return m.err
		}
		if result != nil {
			if err := json.Unmarshal(m.result, result); err != nil {
				return fmt.Errorf("%s: decode %s result %s: %w", c.name, method, truncate(string(m.result), 200), err)
			}
		}
		return nil
	case <-ctx.Done():
		c.forget(id)
		return fmt.Errorf("%s: %s: no reply: %w\nlast frames:\n%s", c.name, method, ctx.Err(), c.lastFrames(8))
	}
}

// SendRaw sends bytes as one frame, unchecked (bad-frame tests).
func (c *RPC) SendRaw(frame []byte) error { return c.send(frame) }

func (c *RPC) forget(id int64) {
	c.mu.Lock()
	delete(c.pending, id)
	delete(c.posted, id)
	c.mu.Unlock()
}

// EventCount is the number of events received so far: a mark to wait for
// events after.
func (c *RPC) EventCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.events)
}

// WaitEvent waits for the first event at or after index from that
// satisfies pred. A failed wait names what it waited for (what) and shows
// the last frames.
func (c *RPC) WaitEvent(ctx context.Context, from int, what string, pred func(Event) bool) (Event, error) {
	stop := syncio.WakeWhenDone(ctx, c.cond)
	defer stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := from; ; {
		for ; i < len(c.events); i++ {
			if pred(c.events[i]) {
				return c.events[i], nil
			}
		}
		if c.closed != nil {
			return Event{}, fmt.Errorf("waiting for %s: %w\nlast frames:\n%s", what, c.closed, c.lastFramesLocked(8))
		}
		if ctx.Err() != nil {
			return Event{}, fmt.Errorf("%s: waiting for %s: %w\nlast frames:\n%s", c.name, what, ctx.Err(), c.lastFramesLocked(8))
		}
		c.cond.Wait()
	}
}

// Events returns a copy of every event so far.
func (c *RPC) Events() []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Event(nil), c.events...)
}

// Frames returns every frame received so far, for the RPC-frame scan.
func (c *RPC) Frames() []Frame {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Frame(nil), c.frames...)
}

// BadFrames lists frames that were not JSON (a protocol violation: stdout
// must carry frames only).
func (c *RPC) BadFrames() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.bad...)
}

func (c *RPC) lastFrames(n int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastFramesLocked(n)
}

func (c *RPC) lastFramesLocked(n int) string {
	start := max(0, len(c.frames)-n)
	var b strings.Builder
	for _, f := range c.frames[start:] {
		b.WriteString("  ")
		b.WriteString(truncate(string(f.Raw), 300))
		b.WriteByte('\n')
	}
	if b.Len() == 0 {
		return "  (none)\n"
	}
	return b.String()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
