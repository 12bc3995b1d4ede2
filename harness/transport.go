package harness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Conn is an RPC client bound to its transport; Close ends the transport
// and waits for its reader.
type Conn struct {
	*RPC
	closeOnce sync.Once
	closeFn   func()
	readDone  chan struct{}
}

// Close ends the connection and waits until its reader has stopped. Safe to
// call more than once.
func (c *Conn) Close() {
	c.closeOnce.Do(c.closeFn)
	<-c.readDone
	c.fail(errors.New("closed by the harness"))
}

// DialStdio speaks the protocol over p's stdin and stdout (one frame a line)
// and waits for the server's ready event. With a dialect it speaks the
// dialect's first transport that is not chat (JSON-RPC or a framed
// envelope).
func DialStdio(ctx context.Context, p *Proc, opts ...DialOption) (*Conn, error) {
	if p.Stdin() == nil {
		return nil, fmt.Errorf("dial %s over stdio: started without a stdin pipe", p.Name())
	}
	var wmu sync.Mutex
	send := func(frame []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		_, err := p.Stdin().Write(append(frame, '\n'))
		return err
	}
	readCtx, cancel := context.WithCancel(context.Background())
	c := &Conn{RPC: newRPC(p.Name(), send), closeFn: cancel, readDone: make(chan struct{})}
	c.apply(opts)
	tr := c.transportFor(true)
	c.speaks = tr
	switch tr.Kind {
	case TransportChat:
		cancel()
		return nil, fmt.Errorf("dial %s over stdio: a chat transport is HTTP, and a stdio backend speaks frames", p.Name())
	case TransportFramed:
		c.wire = envelope{tr.Envelope}
	}
	go func() {
		defer close(c.readDone)
		for i := 0; ; i++ {
			line, err := p.Line(readCtx, i)
			if err != nil {
				c.fail(err)
				return
			}
			c.deliver([]byte(line))
		}
	}()
	if err := c.awaitReady(ctx, tr, ""); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// DialWebsocket connects to a serve backend at base (http://host:port) with
// token and waits until the connection is ready. It speaks the transport
// of its dialect (WithDialect, WithTransport): JSON-RPC 2.0 at
// /api/ws?token=T by default, a framed envelope at the transport's path,
// or, for a chat transport, no socket at all: each turn is a chat request.
func DialWebsocket(ctx context.Context, base, token string, opts ...DialOption) (*Conn, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("dial websocket: bad base URL %q: %w", base, err)
	}
	c := &Conn{RPC: newRPC("websocket "+u.Host, nil), readDone: make(chan struct{})}
	c.apply(opts)
	tr := c.transportFor(false)
	c.speaks = tr
	if tr.Kind == TransportChat {
		c.name = "chat " + u.Host
		dialChat(c, base, token, tr)
		return c, nil
	}
	if tr.Kind == TransportFramed {
		c.wire = envelope{tr.Envelope}
	}
	u.Scheme = map[string]string{"https": "wss"}[u.Scheme]
	if u.Scheme == "" {
		u.Scheme = "ws"
	}
	u.Path = tr.Path
	header := http.Header{}
	switch a := strings.ToLower(tr.Auth); a {
	case "query":
		u.RawQuery = url.Values{"token": {token}}.Encode()
	case "none":
	case "bearer":
		header.Set("Authorization", "Bearer "+token)
	default:
		header.Set(tr.Auth, token)
	}
	dialer := websocket.Dialer{HandshakeTimeout: 0}
	ws, resp, err := dialer.DialContext(ctx, u.String(), header)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
			resp.Body.Close()
		}
		return nil, &DialError{URL: redactToken(u), Status: status, Err: err}
	}
	var wmu sync.Mutex
	c.send = func(frame []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return ws.WriteMessage(websocket.TextMessage, frame)
	}
	c.closeFn = func() {
		wmu.Lock()
		_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		wmu.Unlock()
		ws.Close()
	}
	go func() {
		defer close(c.readDone)
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				c.fail(err)
				return
			}
			c.deliver(data)
		}
	}()
	if err := c.awaitReady(ctx, tr, token); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// DialError is a failed websocket handshake; Status is the HTTP status the
// server answered with (401 for a bad token), or 0.
type DialError struct {
	URL    string
	Status int
	Err    error
}

func (e *DialError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("dial %s: HTTP %d %s: %v", e.URL, e.Status, http.StatusText(e.Status), e.Err)
	}
	return fmt.Sprintf("dial %s: %v", e.URL, e.Err)
}

func (e *DialError) Unwrap() error { return e.Err }

func redactToken(u *url.URL) string {
	c := *u
	if c.RawQuery != "" {
		c.RawQuery = "token=REDACTED"
	}
	return c.String()
}

// awaitReady waits for the ready event (unless the dialect says there is
// none), then sends a framed transport's connect request.
func (c *Conn) awaitReady(ctx context.Context, tr Transport, token string) error {
	ev := c.eventMap()
	if !ev.NoReadyEvt {
		if _, err := c.WaitEvent(ctx, 0, "the "+ev.Ready+" event", func(e Event) bool { return e.Type == ev.Ready }); err != nil {
			return err
		}
	}
	return c.connect(ctx, tr, token)
}
