package wsserve

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tenantcanary/tenantcanary/agentd/rpc"
)

// Defaults for Options fields left zero.
const (
	DefaultQueue    = 1024
	DefaultMaxFrame = 16 << 20
	// DefaultCloseTimeout bounds Close's wait for requests in flight.
	DefaultCloseTimeout = 5 * time.Second
	writeTimeout        = 10 * time.Second
	closeGraceWindow    = time.Second
)

// ErrQueueFull is the reason a slow connection is closed.
var ErrQueueFull = errors.New("send queue full: the client is not reading fast enough")

// ErrCloseTimeout: Close gave up waiting for requests that ignored their
// cancelled context.
var ErrCloseTimeout = errors.New("requests still running after close timeout")

// Options configure a Handler.
type Options struct {
	Token      string
	Dispatcher *rpc.Dispatcher
	Queue      int   // frames queued per connection before it is closed
	MaxFrame   int64 // largest message read
	// OnOpen runs when a connection is up, before any request is read (it
	// sends gateway.ready).
	OnOpen func(c rpc.Conn) error
	// OnClose runs once a connection is gone (its sessions end).
	OnClose func(connID string)
	// CloseTimeout bounds Close's wait (DefaultCloseTimeout when zero).
	CloseTimeout time.Duration
	// MaxInFlight bounds the requests of one connection read and not yet
	// answered: past it the connection is not read until one is answered,
	// so a flooding client is held back by TCP instead of costing the
	// server work. Zero means no bound.
	MaxInFlight int
	// Tenant, when set, names the profile whose tenant credential a token
	// other than Token is; such a connection is bound to that profile
	// (Conn.Tenant). Nil: only Token opens a connection.
	Tenant func(token string) (profile string, ok bool)
}

// Handler serves /api/ws and /api/health.
type Handler struct {
	opts     Options
	upgrader websocket.Upgrader
	ctx      context.Context
	cancel   context.CancelFunc

	mu       sync.Mutex
	conns    map[*Conn]struct{}
	closed   bool
	wg       sync.WaitGroup // connections
	inflight sync.WaitGroup // requests being dispatched
}

// New returns a Handler.
func New(opts Options) *Handler {
	if opts.Queue <= 0 {
		opts.Queue = DefaultQueue
	}
	if opts.MaxFrame <= 0 {
		opts.MaxFrame = DefaultMaxFrame
	}
	if opts.CloseTimeout <= 0 {
		opts.CloseTimeout = DefaultCloseTimeout
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Handler{
		opts: opts, ctx: ctx, cancel: cancel, conns: map[*Conn]struct{}{},
		upgrader: websocket.Upgrader{
			ReadBufferSize: 32 << 10, WriteBufferSize: 32 << 10,
			// Clients are local programs, not browsers; the token is the gate.
			CheckOrigin: func(*http.Request) bool { return true },
		},
	}
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/api/health":
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	case "/api/ws":
		h.serveWS(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (h *Handler) serveWS(w http.ResponseWriter, r *http.Request) {
	tok := r.URL.Query().Get("token")
	tenant, ok := h.authenticate(tok)
	if !ok {
		http.Error(w, "missing or wrong token", http.StatusUnauthorized)
		return
	}
	h.mu.Lock()
	closed := h.closed
	h.mu.Unlock()
	if closed {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	ws, err := h.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader has answered
	}
	ws.SetReadLimit(h.opts.MaxFrame)
	credential := ""
	if tenant != "" {
		credential = tok
	}
	c := &Conn{id: rpc.NewConnID("ws"), tenant: tenant, credential: credential, ws: ws, queue: make(chan []byte, h.opts.Queue), done: make(chan struct{}), writerDone: make(chan struct{})}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		_ = ws.Close()
		return
	}
	h.conns[c] = struct{}{}
	h.wg.Add(1)
	h.mu.Unlock()
	defer h.wg.Done()
	go c.writer()
	defer func() {
		c.shutdown(websocket.CloseNormalClosure, "bye")
		<-c.writerDone
		h.mu.Lock()
		delete(h.conns, c)
		h.mu.Unlock()
		if h.opts.OnClose != nil {
			h.opts.OnClose(c.id)
		}
	}()
	if h.opts.OnOpen != nil {
		if err := h.opts.OnOpen(c); err != nil {
			return
		}
	}
	var reqs sync.WaitGroup
	defer reqs.Wait()
	var inflight chan struct{} // a slot per request read and not answered
	if h.opts.MaxInFlight > 0 {
		inflight = make(chan struct{}, h.opts.MaxInFlight)
	}
	for {
		if inflight != nil {
			select {
			case inflight <- struct{}{}:
			case <-h.ctx.Done():
				return
			case <-c.done:
				return
			}
		}
		typ, msg, err := ws.ReadMessage()
		if err != nil {
			if errors.Is(err, websocket.ErrReadLimit) {
				_ = c.Send(rpc.EventFrame(rpc.Event{Type: "error", Payload: map[string]string{"message": "frame too large"}}))
			} else {
				// The peer is gone: what waits on its behalf (a slot, a
				// refusal's hold) stops waiting now, not once every
				// request it left behind is served.
				c.doneOnce.Do(func() { close(c.done) })
			}
			return
		}
		if typ != websocket.TextMessage && typ != websocket.BinaryMessage {
			if inflight != nil {
				<-inflight
			}
			continue
		}
		h.mu.Lock()
		if h.closed { // Close is waiting for the requests in flight: no more
			h.mu.Unlock()
			return
		}
		h.inflight.Add(1)
		h.mu.Unlock()
		reqs.Add(1)
		go func() {
			defer h.inflight.Done()
			defer reqs.Done()
			if inflight != nil {
				defer func() { <-inflight }()
			}
			h.opts.Dispatcher.Dispatch(h.ctx, c, msg)
		}()
	}
}

// Close stops accepting connections, cancels the context of every request
// in flight, and closes every open connection after its queued frames are
// written. It waits for every connection's goroutines, at most
// CloseTimeout: a request that ignores its context is left behind
// (ErrCloseTimeout) rather than holding the server up.
func (h *Handler) Close() error {
	h.mu.Lock()
	h.closed = true
	conns := make([]*Conn, 0, len(h.conns))
	for c := range h.conns {
		conns = append(conns, c)
	}
	h.mu.Unlock()
	t := time.NewTimer(h.opts.CloseTimeout)
	defer t.Stop()
	// Cancelled requests answer first, so their replies go out before the
	// close frames.
	h.cancel()
	answered := make(chan struct{})
	go func() { h.inflight.Wait(); close(answered) }() // ends with the last request
	select {
	case <-answered:
	case <-t.C:
		for _, c := range conns {
			c.shutdown(websocket.CloseGoingAway, "server shutting down")
		}
		return fmt.Errorf("close websocket server: %w (%s)", ErrCloseTimeout, h.opts.CloseTimeout)
	}
	for _, c := range conns {
		c.shutdown(websocket.CloseGoingAway, "server shutting down")
	}
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }() // ends with the last connection
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("close websocket server: %w (%d connections still flushing after %s)", ErrCloseTimeout, h.Conns(), h.opts.CloseTimeout)
	}
}

// Conns is the number of open connections.
func (h *Handler) Conns() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns)
}

// authenticate says whom tok admits: the operator (Token: "", true), a
// tenant (its profile, true), or no one.
func (h *Handler) authenticate(tok string) (tenant string, ok bool) {
	if tok == "" {
		return "", false
	}
	if subtle.ConstantTimeCompare([]byte(tok), []byte(h.opts.Token)) == 1 {
		return "", true
	}
	if h.opts.Tenant != nil {
		if name, ok := h.opts.Tenant(tok); ok && name != "" {
			return name, true
		}
	}
	return "", false
}

// Conn is one websocket connection.
type Conn struct {
	id         string
	tenant     string // the profile a tenant credential bound it to; "" for the operator
	credential string // that tenant credential, re-checked at every call
	ws         *websocket.Conn
	queue      chan []byte
	done       chan struct{}
	writerDone chan struct{}

	mu       sync.Mutex
	closing  bool
	code     int
	reason   string
	doneOnce sync.Once
}

// ID implements rpc.Conn.
func (c *Conn) ID() string { return c.id }

// Tenant is the profile this connection is bound to (it authenticated
// with that profile's tenant credential), or "" for an operator connection.
func (c *Conn) Tenant() string { return c.tenant }

// Credential is the tenant credential the connection opened with ("" for
// the operator): the server checks it still opens the profile at every
// call, so a deleted (or re-created) profile or a rotated key ends its
// reach.
func (c *Conn) Credential() string { return c.credential }

// Done implements rpc.Conn.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Send implements rpc.Conn: it queues the frame, or closes the connection
// when its queue is full.
func (c *Conn) Send(frame []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return errors.New("send frame: connection closed")
	}
	select {
	case c.queue <- frame:
		return nil
	default:
		c.startClose(websocket.ClosePolicyViolation, ErrQueueFull.Error())
		return ErrQueueFull
	}
}

func (c *Conn) shutdown(code int, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.startClose(code, reason)
}

// startClose marks the connection closing; the writer flushes the queue,
// sends the close frame and closes the socket. c.mu is held.
func (c *Conn) startClose(code int, reason string) {
	if c.closing {
		return
	}
	c.closing = true
	c.code, c.reason = code, reason
	close(c.queue)
}

// writer owns every write to the socket.
func (c *Conn) writer() {
	defer close(c.writerDone)
	defer c.doneOnce.Do(func() { close(c.done) })
	defer c.ws.Close()
	for frame := range c.queue {
		c.mu.Lock()
		code := c.code
		c.mu.Unlock()
		if code == websocket.ClosePolicyViolation {
			break // a slow client gets no more frames, just the reason
		}
		_ = c.ws.SetWriteDeadline(time.Now().Add(writeTimeout))
		if err := c.ws.WriteMessage(websocket.TextMessage, frame); err != nil {
			c.shutdown(websocket.CloseAbnormalClosure, err.Error())
			for range c.queue {
			}
			return
		}
	}
	c.mu.Lock()
	code, reason := c.code, c.reason
	c.mu.Unlock()
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(closeGraceWindow))
}
