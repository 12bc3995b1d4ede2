package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Error codes.
const (
	CodeParse          = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternal       = -32603

	CodeForbidden      = 4030 // the session belongs to another connection
	CodeUnknownSession = 4044 // no such live or stored session
	CodeUnknownProfile = 4064 // no such profile
	CodeConflict       = 4090 // exists already, or busy
	CodeTooBusy        = 4290 // too many requests or turns in flight; Data carries retry_after_ms
	CodeWorkdirRefused = 4003 // a cwd outside the profile's own home and workdir roots; the message names the rule
	CodeLinkOut        = 4013 // a home file is a link that leaves the home (or is not a regular file, or is too large)
	CodeUnavailable    = 5030 // shutting down
)

// Error is a JSON-RPC error object; handlers return it to choose the code.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("rpc error %d: %s", e.Code, e.Message) }

// Errorf builds an *Error.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Conn is one client connection: the dispatcher writes replies to it and
// the server sends events on it. Send must be safe for concurrent use and
// write each frame whole.
type Conn interface {
	// ID names the connection, unique within the process.
	ID() string
	// Send writes one frame (a JSON object, no trailing newline).
	Send(frame []byte) error
	// Done is closed when the connection is gone.
	Done() <-chan struct{}
}

// Call is one request being served.
type Call struct {
	Conn   Conn
	Method string
	ID     json.RawMessage
	Params json.RawMessage
}

// Bind decodes the params object into v, rejecting unknown fields. Absent
// params decode as {}. The error is an *Error with CodeInvalidParams.
func (c *Call) Bind(v any) error {
	p := bytes.TrimSpace(c.Params)
	if len(p) == 0 || string(p) == "null" {
		p = []byte("{}")
	}
	if p[0] != '{' {
		return Errorf(CodeInvalidParams, "%s: params must be an object", c.Method)
	}
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return Errorf(CodeInvalidParams, "%s: bad params: %v", c.Method, err)
	}
	return nil
}

// Handler serves one method. It returns a result to encode, or an error
// (an *Error keeps its code; anything else is -32603). A result of type
// Then is answered first and its follow-up runs after the reply is sent.
type Handler func(ctx context.Context, c *Call) (any, error)

// Then is a result whose After runs once the reply has been written, so
// that events a request starts never overtake its reply.
type Then struct {
	Result any
	After  func()
}

// Admit runs before a request's handler: it returns once the request may
// run (perhaps after waiting its turn), with a func to call when it is
// done, or an error that becomes the request's reply.
type Admit func(ctx context.Context, c *Call) (release func(), err error)

// TenantConn is a Conn that knows which profile's tenant opened it (a
// per-tenant token, say); admission counts its requests to that profile.
type TenantConn interface {
	Conn
	Tenant() string
}

// Dispatcher routes requests to handlers.
type Dispatcher struct {
	mu       sync.RWMutex
	handlers map[string]Handler
	admit    Admit
	tarpit   time.Duration

	heldMu sync.Mutex
	held   map[string]int // refusals held back now, by connection
}

// SetRefusalDelay holds every CodeTooBusy reply back for d (or until the
// dispatch context or the connection ends) after the request gave back
// whatever it held: a client that floods past its limits is answered no
// faster, and a transport that bounds the requests in flight per
// connection reads it no faster either. A connection with many refusals
// held at once (a client that keeps sending past its limits without
// waiting for their answers) waits longer for each: the delay doubles
// with every heldStep of them, up to 1<<maxHeldShift times d. Without
// that, a tenant's connections, each read up to its bound, kept agentd
// refusing thousands of requests a second, at a cost to every other
// tenant.
func (d *Dispatcher) SetRefusalDelay(delay time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.tarpit = delay
}

// SetAdmit makes every request pass a before its handler runs.
func (d *Dispatcher) SetAdmit(a Admit) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.admit = a
}

// NewDispatcher returns an empty dispatcher.
func NewDispatcher() *Dispatcher {
	return &Dispatcher{handlers: map[string]Handler{}, held: map[string]int{}}
}

// Handle registers h for method, replacing any earlier handler.
func (d *Dispatcher) Handle(method string, h Handler) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.handlers[method] = h
}

// Methods lists the registered methods.
func (d *Dispatcher) Methods() []string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make([]string, 0, len(d.handlers))
	for m := range d.handlers {
		out = append(out, m)
	}
	return out
}

type request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  *string         `json:"method"`
	Params  json.RawMessage `json:"params"`
}

type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

var null = json.RawMessage("null")

// Dispatch serves one frame from conn and writes the reply (notifications,
// requests without an id, get none). It blocks until the handler returns;
// transports call it in a goroutine per frame.
func (d *Dispatcher) Dispatch(ctx context.Context, conn Conn, frame []byte) {
	var req request
	if err := json.Unmarshal(frame, &req); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) || !json.Valid(frame) {
			reply(conn, null, nil, Errorf(CodeParse, "parse error: %v", err))
			return
		}
		reply(conn, null, nil, Errorf(CodeInvalidRequest, "invalid request: %v", err))
		return
	}
	id := req.ID
	if len(id) == 0 {
		id = nil
	} else if !validID(id) {
		reply(conn, null, nil, Errorf(CodeInvalidRequest, "invalid request: id must be a number or a string"))
		return
	}
	if req.JSONRPC != "2.0" {
		reply(conn, orNull(id), nil, Errorf(CodeInvalidRequest, `invalid request: jsonrpc must be "2.0"`))
		return
	}
	if req.Method == nil || *req.Method == "" {
		reply(conn, orNull(id), nil, Errorf(CodeInvalidRequest, "invalid request: no method"))
		return
	}
	d.mu.RLock()
	h, admit, tarpit := d.handlers[*req.Method], d.admit, d.tarpit
	d.mu.RUnlock()
	if h == nil {
		if id != nil {
			reply(conn, id, nil, Errorf(CodeMethodNotFound, "method not found: %q", *req.Method))
		}
		return
	}
	call := &Call{Conn: conn, Method: *req.Method, ID: id, Params: req.Params}
	release := func() {}
	if admit != nil {
		var err error
		if release, err = admit(ctx, call); err != nil {
			d.hold(ctx, conn, tarpit, err)
			if id != nil {
				reply(conn, id, nil, asError(err))
			}
			return
		}
	}
	result, err := safeCall(ctx, h, call)
	release()
	d.hold(ctx, conn, tarpit, err)
	var then Then
	if t, ok := result.(Then); ok {
		then = t
		result = t.Result
	}
	if id != nil {
		if err != nil {
			reply(conn, id, nil, asError(err))
		} else {
			if result == nil {
				result = struct{}{}
			}
			reply(conn, id, result, nil)
		}
	}
	if err == nil && then.After != nil {
		then.After()
	}
}

// How a connection's refusal delay grows with the refusals it has held
// back at once: doubled with every heldStep, at most 1<<maxHeldShift
// times.
const (
	heldStep     = 16
	maxHeldShift = 4
)

// refusalDelay is a refusal's delay on a connection that holds back
// held refusals already.
func refusalDelay(base time.Duration, held int) time.Duration {
	return base << min(held/heldStep, maxHeldShift)
}

// hold waits out the refusal delay when err is a CodeTooBusy refusal: the
// longer, the more refusals of conn are held back already.
func (d *Dispatcher) hold(ctx context.Context, conn Conn, delay time.Duration, err error) {
	var e *Error
	if delay <= 0 || !errors.As(err, &e) || e.Code != CodeTooBusy {
		return
	}
	id := conn.ID()
	d.heldMu.Lock()
	n := d.held[id]
	d.held[id] = n + 1
	d.heldMu.Unlock()
	defer func() {
		d.heldMu.Lock()
		defer d.heldMu.Unlock()
		if d.held[id]--; d.held[id] == 0 {
			delete(d.held, id)
		}
	}()
	t := time.NewTimer(refusalDelay(delay, n))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-conn.Done(): // nobody is left to answer
	}
}

func safeCall(ctx context.Context, h Handler, c *Call) (res any, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = nil, Errorf(CodeInternal, "internal error in %s: %v", c.Method, r)
		}
	}()
	return h(ctx, c)
}

func validID(id json.RawMessage) bool {
	switch id[0] {
	case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return true
	}
	return string(id) == "null"
}

func orNull(id json.RawMessage) json.RawMessage {
	if id == nil {
		return null
	}
	return id
}

func asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}

func reply(conn Conn, id json.RawMessage, result any, e *Error) {
	frame, err := json.Marshal(response{JSONRPC: "2.0", ID: id, Result: result, Error: e})
	if err != nil {
		frame, _ = json.Marshal(response{JSONRPC: "2.0", ID: id, Error: Errorf(CodeInternal, "encode result: %v", err)})
	}
	_ = conn.Send(frame) // a gone connection has no one to tell
}

// Event is the params of an event notification.
type Event struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id,omitempty"`
	Payload   any    `json:"payload"`
}

// EventFrame encodes an event notification.
func EventFrame(ev Event) []byte {
	if ev.Payload == nil {
		ev.Payload = struct{}{}
	}
	frame, err := json.Marshal(struct {
		JSONRPC string `json:"jsonrpc"`
		Method  string `json:"method"`
		Params  Event  `json:"params"`
	}{"2.0", "event", ev})
	if err != nil {
		frame, _ = json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "event",
			"params": Event{Type: "error", SessionID: ev.SessionID, Payload: map[string]string{"message": "encode event: " + err.Error()}}})
	}
	return frame
}
