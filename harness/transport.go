package harness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
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
// and waits for the server's gateway.ready event.
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
	if err := c.awaitReady(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// DialWebsocket connects to a serve backend's /api/ws with token and waits
// for its gateway.ready event. base is http://host:port.
func DialWebsocket(ctx context.Context, base, token string, opts ...DialOption) (*Conn, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("dial websocket: bad base URL %q: %w", base, err)
	}
	u.Scheme = map[string]string{"https": "wss"}[u.Scheme]
	if u.Scheme == "" {
		u.Scheme = "ws"
	}
	u.Path = "/api/ws"
	u.RawQuery = url.Values{"token": {token}}.Encode()
	dialer := websocket.Dialer{HandshakeTimeout: 0}
	ws, resp, err := dialer.DialContext(ctx, u.String(), nil)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
			resp.Body.Close()
		}
		return nil, &DialError{URL: redactToken(u), Status: status, Err: err}
	}
	var wmu sync.Mutex
	send := func(frame []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return ws.WriteMessage(websocket.TextMessage, frame)
	}
	c := &Conn{RPC: newRPC("websocket "+u.Host, send), readDone: make(chan struct{})}
	c.apply(opts)
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
	if err := c.awaitReady(ctx); err != nil {
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
	c.RawQuery = "token=REDACTED"
	return c.String()
}

func (c *Conn) awaitReady(ctx context.Context) error {
	ev := c.eventMap()
	if ev.NoReadyEvt {
		return nil
	}
	_, err := c.WaitEvent(ctx, 0, "the "+ev.Ready+" event", func(e Event) bool { return e.Type == ev.Ready })
	return err
}
