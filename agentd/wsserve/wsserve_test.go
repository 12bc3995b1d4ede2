package wsserve

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/rpc"
)

func newServer(t *testing.T, opts Options) (*Handler, *httptest.Server) {
	t.Helper()
	if opts.Dispatcher == nil {
		opts.Dispatcher = rpc.NewDispatcher()
		opts.Dispatcher.Handle("echo", func(ctx context.Context, c *rpc.Call) (any, error) {
			var p map[string]any
			_ = json.Unmarshal(c.Params, &p)
			return p, nil
		})
	}
	opts.Token = "tok"
	h := New(opts)
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		_ = h.Close()
		srv.Close()
	})
	return h, srv
}

func wsURL(srv *httptest.Server, token string) string {
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/api/ws?token=" + token
}

func TestTokenAndHealth(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, Options{})
	resp, err := http.Get(srv.URL + "/api/health")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	for _, tok := range []string{"", "wrong", "tok2"} {
		_, resp, err := websocket.DefaultDialer.Dial(wsURL(srv, tok), nil)
		require.Error(t, err)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "token %q", tok)
	}
	c, _, err := websocket.DefaultDialer.Dial(wsURL(srv, "tok"), nil)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":"b"}}`)))
	_, msg, err := c.ReadMessage()
	require.NoError(t, err)
	require.JSONEq(t, `{"jsonrpc":"2.0","id":1,"result":{"a":"b"}}`, string(msg))
}

func TestSlowConsumerIsClosedOthersServed(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	conns := map[string]rpc.Conn{}
	closed := make(chan string, 4)
	_, srv := newServer(t, Options{Queue: 4,
		OnOpen: func(c rpc.Conn) error {
			mu.Lock()
			conns[c.ID()] = c
			mu.Unlock()
			return c.Send([]byte(`{"hello":true}`))
		},
		OnClose: func(id string) { closed <- id },
	})
	slow, _, err := websocket.DefaultDialer.Dial(wsURL(srv, "tok"), nil)
	require.NoError(t, err)
	defer slow.Close()
	_, _, err = slow.ReadMessage() // hello
	require.NoError(t, err)
	fast, _, err := websocket.DefaultDialer.Dial(wsURL(srv, "tok"), nil)
	require.NoError(t, err)
	defer fast.Close()
	_, _, err = fast.ReadMessage()
	require.NoError(t, err)

	// The slow client never reads: flood its connection (the first opened;
	// ids are sequential).
	mu.Lock()
	require.Len(t, conns, 2)
	ids := make([]string, 0, 2)
	for id := range conns {
		ids = append(ids, id)
	}
	if connNum(ids[0]) > connNum(ids[1]) {
		ids[0], ids[1] = ids[1], ids[0]
	}
	target := conns[ids[0]]
	mu.Unlock()
	big := []byte(`"` + strings.Repeat("x", 256<<10) + `"`)
	var sendErr error
	for i := 0; i < 10000 && sendErr == nil; i++ {
		sendErr = target.Send(big)
	}
	require.ErrorIs(t, sendErr, ErrQueueFull)
	select {
	case id := <-closed:
		require.Equal(t, ids[0], id)
	case <-time.After(30 * time.Second):
		t.Fatal("the slow connection was never closed")
	}
	// The other connection is served as before.
	require.NoError(t, fast.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","id":2,"method":"echo","params":{}}`)))
	_, msg, err := fast.ReadMessage()
	require.NoError(t, err)
	require.Contains(t, string(msg), `"id":2`)
	// The slow one, once it reads, finds the close reason.
	for {
		_, _, err = slow.ReadMessage()
		if err != nil {
			break
		}
	}
	var ce *websocket.CloseError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, websocket.ClosePolicyViolation, ce.Code)
	require.Contains(t, ce.Text, "send queue full")
}

func connNum(id string) int {
	var n int
	_, _ = fmt.Sscanf(id, "ws-%d", &n)
	return n
}

// A request waiting on its context ends when Close cancels it; one that
// ignores its context cannot hold Close past CloseTimeout.
func TestCloseIsBoundedByAWedgedHandler(t *testing.T) {
	t.Parallel()
	d := rpc.NewDispatcher()
	unwedge := make(chan struct{})
	entered := make(chan string, 2)
	d.Handle("wait", func(ctx context.Context, c *rpc.Call) (any, error) {
		entered <- "wait"
		<-ctx.Done()
		return nil, ctx.Err()
	})
	d.Handle("wedge", func(ctx context.Context, c *rpc.Call) (any, error) {
		entered <- "wedge"
		<-unwedge
		return nil, nil
	})
	h, srv := newServer(t, Options{Dispatcher: d, CloseTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { close(unwedge) }) // before newServer's own cleanup
	c, _, err := websocket.DefaultDialer.Dial(wsURL(srv, "tok"), nil)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","id":1,"method":"wait"}`)))
	require.NoError(t, c.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","id":2,"method":"wedge"}`)))
	<-entered
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- h.Close() }()
	select {
	case err = <-closed:
	case <-time.After(60 * time.Second):
		t.Fatal("Close did not return with a wedged handler")
	}
	require.ErrorIs(t, err, ErrCloseTimeout)
	// The waiting request was cancelled and answered before the close frame.
	_, msg, err := c.ReadMessage()
	require.NoError(t, err)
	require.Contains(t, string(msg), `"id":1`)
	require.Contains(t, string(msg), "context canceled")
}

// A connection at MaxInFlight is not read until a request is answered:
// a request sent behind two held ones runs only after one of them returned.
func TestAConnectionIsReadNoFasterThanItIsAnswered(t *testing.T) {
	t.Parallel()
	d := rpc.NewDispatcher()
	release := make(chan struct{})
	var mu sync.Mutex
	entered, returned := 0, 0
	d.Handle("hold", func(ctx context.Context, c *rpc.Call) (any, error) {
		mu.Lock()
		entered++
		mu.Unlock()
		select {
		case <-release:
		case <-ctx.Done():
		}
		mu.Lock()
		returned++
		mu.Unlock()
		return map[string]bool{"ok": true}, nil
	})
	d.Handle("count", func(ctx context.Context, c *rpc.Call) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		return map[string]int{"returned": returned}, nil
	})
	_, srv := newServer(t, Options{Dispatcher: d, MaxInFlight: 2})
	c, _, err := websocket.DefaultDialer.Dial(wsURL(srv, "tok"), nil)
	require.NoError(t, err)
	defer c.Close()
	for _, frame := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"hold"}`, `{"jsonrpc":"2.0","id":2,"method":"hold"}`, `{"jsonrpc":"2.0","id":3,"method":"count"}`,
	} {
		require.NoError(t, c.WriteMessage(websocket.TextMessage, []byte(frame)))
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := entered
		mu.Unlock()
		if n == 2 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the two held requests never started")
	}
	release <- struct{}{} // one hold returns
	for {
		_, msg, err := c.ReadMessage()
		require.NoError(t, err)
		var m struct {
			ID     int            `json:"id"`
			Result map[string]any `json:"result"`
		}
		require.NoError(t, json.Unmarshal(msg, &m))
		if m.ID == 3 {
			require.EqualValues(t, 1, m.Result["returned"], "count was read only once a held request was answered")
			break
		}
	}
	close(release)
}

// A connection is done as soon as its peer is gone, not once the requests
// it left behind are served: what waits on its behalf (a slot, a held
// refusal) stops waiting then.
func TestAConnectionIsDoneWhenItsPeerGoes(t *testing.T) {
	t.Parallel()
	d := rpc.NewDispatcher()
	entered, release := make(chan rpc.Conn, 1), make(chan struct{})
	d.Handle("hold", func(ctx context.Context, c *rpc.Call) (any, error) {
		entered <- c.Conn
		<-release // deaf to its context and connection: the request is left behind
		return nil, nil
	})
	_, srv := newServer(t, Options{Dispatcher: d})
	defer close(release)
	c, _, err := websocket.DefaultDialer.Dial(wsURL(srv, "tok"), nil)
	require.NoError(t, err)
	require.NoError(t, c.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","id":1,"method":"hold"}`)))
	conn := <-entered
	select {
	case <-conn.Done():
		t.Fatal("the connection was done while its peer was still there")
	default:
	}
	require.NoError(t, c.Close())
	select {
	case <-conn.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the connection was not done after its peer left, with a request of it still running")
	}
}
