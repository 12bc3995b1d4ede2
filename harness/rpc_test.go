package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The test binary doubles as a minimal protocol peer, so the clients are
// tested over a real pipe and a real websocket. It is a peer for the client,
// not a stand-in for any target: targets are certified by the scenarios.
func TestMain(m *testing.M) {
	if os.Getenv("HARNESS_TEST_PEER") == "stdio" {
		var mu sync.Mutex
		out := bufio.NewWriter(os.Stdout)
		write := func(b []byte) {
			mu.Lock()
			defer mu.Unlock()
			out.Write(append(b, '\n'))
			out.Flush()
		}
		sc := bufio.NewScanner(os.Stdin)
		peer(sc.Scan, sc.Bytes, write)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// peer answers: "echo" (replies after the given delay, so replies overtake
// each other), "turn" (events for a session, then the reply), "garbage"
// (a non-JSON frame), "silent" (never), anything else -32601.
func peer(next func() bool, frame func() []byte, write func([]byte)) {
	ev := func(typ, sid string, payload map[string]any) {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "event", "params": map[string]any{"type": typ, "session_id": sid, "payload": payload}})
		write(b)
	}
	ev("gateway.ready", "", map[string]any{})
	var wg sync.WaitGroup
	defer wg.Wait()
	for next() {
		var req struct {
			ID     int64          `json:"id"`
			Method string         `json:"method"`
			Params map[string]any `json:"params"`
		}
		if json.Unmarshal(frame(), &req) != nil {
			continue
		}
		reply := func(result any) {
			b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": result})
			write(b)
		}
		switch req.Method {
		case "echo":
			delay, _ := req.Params["delay_ms"].(float64)
			params := req.Params
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(delay) * time.Millisecond) // the peer's own pacing, not a test synchronisation
				reply(params)
			}()
		case "prompt.submit":
			sid, _ := req.Params["session_id"].(string)
			reply(map[string]any{"status": "streaming"})
			ev("message.start", sid, map[string]any{})
			status := "complete"
			if req.Params["text"] == "fail" {
				status = "error"
			}
			ev("message.complete", sid, map[string]any{"text": "done", "status": status})
		case "silent": // never answered
		case "garbage":
			write([]byte("this is not json"))
			reply(true)
		default:
			b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": req.ID, "error": map[string]any{"code": -32601, "message": "method not found: " + req.Method}})
			write(b)
		}
	}
}

func exercise(t *testing.T, c *Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Replies out of order are matched by id.
	var wg sync.WaitGroup
	got := make([]float64, 3)
	for i, d := range []float64{300, 150, 0} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r map[string]any
			assert.NoError(t, c.Call(ctx, "echo", map[string]any{"delay_ms": d, "n": i}, &r))
			got[i] = r["n"].(float64)
		}()
	}
	wg.Wait()
	assert.Equal(t, []float64{0, 1, 2}, got)

	var rerr *RPCError
	err := c.Call(ctx, "nope", nil, nil)
	require.True(t, errors.As(err, &rerr), "%v", err)
	assert.Equal(t, -32601, rerr.Code)

	_, err = c.Turn(ctx, "s1", "hello")
	require.NoError(t, err)
	_, err = c.Turn(ctx, "s1", "fail")
	require.ErrorContains(t, err, "turn of session s1 failed")

	require.NoError(t, c.Call(ctx, "garbage", nil, nil))
	assert.Equal(t, []string{"this is not json"}, c.BadFrames())

	short, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	_, err = c.WaitEvent(short, 0, "an event that never comes", func(e Event) bool { return e.Type == "never" })
	require.ErrorContains(t, err, "an event that never comes")
	require.ErrorContains(t, err, "message.complete", "a failed wait shows the last frames")

	// Posted requests are not waited on: their outcomes come as the
	// replies do, or with the connection's end.
	outcomes := make(chan error, 3)
	post := func(err error) { outcomes <- err }
	require.NoError(t, c.Post("echo", map[string]any{"delay_ms": 0.0}, post))
	require.NoError(t, c.Post("nope", nil, post))
	var posted []error
	for range 2 {
		posted = append(posted, <-outcomes)
	}
	require.Len(t, posted, 2)
	require.True(t, posted[0] == nil && errors.As(posted[1], &rerr) || posted[1] == nil && errors.As(posted[0], &rerr), "%v", posted)
	assert.Equal(t, -32601, rerr.Code)
	require.NoError(t, c.Post("silent", nil, post), "a request the peer never answers")

	// A chosen id: its reply is awaited by that id, an id in flight is
	// refused, and once answered the same id may be sent again (a replay).
	silent, stop := context.WithCancel(ctx)
	never := make(chan error, 1)
	go func() { never <- c.CallWithID(silent, 7777, "silent", nil, nil) }()
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.inFlight(7777)
	}, 10*time.Second, 5*time.Millisecond)
	require.ErrorIs(t, c.CallWithID(ctx, 7777, "echo", nil, nil), ErrIDInFlight, "a second request with an id in flight is refused")
	stop()
	require.ErrorIs(t, <-never, context.Canceled)
	for round := range 2 {
		var r map[string]any
		require.NoError(t, c.CallWithID(ctx, 7777, "echo", map[string]any{"round": round}, &r))
		assert.Equal(t, float64(round), r["round"])
	}
	_, err = c.TurnWithID(ctx, 7777, "s1", "hello")
	require.NoError(t, err, "a turn whose prompt.submit has a chosen id")
	replies := 0
	for _, f := range c.Frames() {
		var m struct {
			ID int64 `json:"id"`
		}
		if json.Unmarshal(f.Raw, &m) == nil && m.ID == 7777 {
			replies++
		}
	}
	assert.Equal(t, 3, replies, "every reply to the chosen id is among the frames")
	require.Error(t, c.CallWithID(ctx, 0, "echo", nil, nil), "an id must be above 0")

	assert.GreaterOrEqual(t, len(c.Frames()), 10)
	c.Close()
	c.Close()
	require.ErrorIs(t, <-outcomes, ErrClosed, "a posted request in flight ends with the connection")
	err = c.Call(ctx, "echo", nil, nil)
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, c.Post("echo", nil, post), ErrClosed)
}

func TestStdioClient(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	require.NoError(t, err)
	ctx := context.Background()
	p, err := StartProc(ctx, ProcSpec{Name: "peer", Argv: []string{exe}, Env: append(os.Environ(), "HARNESS_TEST_PEER=stdio"),
		Stdin: true, LogPath: filepath.Join(t.TempDir(), "log")})
	require.NoError(t, err)
	defer p.Kill()
	c, err := DialStdio(ctx, p)
	require.NoError(t, err)
	exercise(t, c)
	require.NoError(t, p.Stop(10*time.Second))
}

func TestWebsocketClient(t *testing.T) {
	t.Parallel()
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("token") != "tok" {
			http.Error(w, "bad token", http.StatusUnauthorized)
			return
		}
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		var mu sync.Mutex
		var data []byte
		peer(func() bool {
			var err error
			_, data, err = ws.ReadMessage()
			return err == nil
		}, func() []byte { return data }, func(b []byte) {
			mu.Lock()
			defer mu.Unlock()
			_ = ws.WriteMessage(websocket.TextMessage, b)
		})
	}))
	defer srv.Close()
	ctx := context.Background()
	_, err := DialWebsocket(ctx, srv.URL, "wrong")
	var derr *DialError
	require.True(t, errors.As(err, &derr), "%v", err)
	assert.Equal(t, 401, derr.Status)
	assert.NotContains(t, err.Error(), "wrong", "the token is never printed")
	c, err := DialWebsocket(ctx, srv.URL, "tok")
	require.NoError(t, err)
	exercise(t, c)
}
