package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type memConn struct {
	mu     sync.Mutex
	frames []map[string]any
	done   chan struct{}
}

func (c *memConn) ID() string              { return "mem" }
func (c *memConn) Done() <-chan struct{}   { return c.done }
func (c *memConn) Send(frame []byte) error { return c.add(frame) }
func (c *memConn) add(frame []byte) error {
	var m map[string]any
	if err := json.Unmarshal(frame, &m); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frames = append(c.frames, m)
	return nil
}

func (c *memConn) last(t *testing.T) map[string]any {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	require.NotEmpty(t, c.frames)
	return c.frames[len(c.frames)-1]
}

func code(m map[string]any) int {
	e, _ := m["error"].(map[string]any)
	if e == nil {
		return 0
	}
	return int(e["code"].(float64))
}

func testDispatcher() *Dispatcher {
	d := NewDispatcher()
	d.Handle("echo", func(ctx context.Context, c *Call) (any, error) {
		var p struct {
			Text string `json:"text"`
		}
		if err := c.Bind(&p); err != nil {
			return nil, err
		}
		return map[string]string{"text": p.Text}, nil
	})
	d.Handle("boom", func(ctx context.Context, c *Call) (any, error) { panic("kaboom") })
	d.Handle("app", func(ctx context.Context, c *Call) (any, error) {
		return nil, Errorf(CodeUnknownProfile, "unknown profile %q", "x")
	})
	return d
}

func TestDispatchCodes(t *testing.T) {
	t.Parallel()
	d := testDispatcher()
	c := &memConn{done: make(chan struct{})}
	cases := []struct {
		frame string
		code  int
		id    any
	}{
		{`{not json`, CodeParse, nil},
		{`[1,2]`, CodeInvalidRequest, nil},
		{`{"jsonrpc":"1.0","id":1,"method":"echo"}`, CodeInvalidRequest, 1.0},
		{`{"jsonrpc":"2.0","id":2}`, CodeInvalidRequest, 2.0},
		{`{"jsonrpc":"2.0","id":{"x":1},"method":"echo"}`, CodeInvalidRequest, nil},
		{`{"jsonrpc":"2.0","id":3,"method":"nope"}`, CodeMethodNotFound, 3.0},
		{`{"jsonrpc":"2.0","id":4,"method":"echo","params":[1]}`, CodeInvalidParams, 4.0},
		{`{"jsonrpc":"2.0","id":5,"method":"echo","params":{"text":5}}`, CodeInvalidParams, 5.0},
		{`{"jsonrpc":"2.0","id":6,"method":"echo","params":{"other":"x"}}`, CodeInvalidParams, 6.0},
		{`{"jsonrpc":"2.0","id":"s7","method":"boom"}`, CodeInternal, "s7"},
		{`{"jsonrpc":"2.0","id":8,"method":"app"}`, CodeUnknownProfile, 8.0},
		{`{"jsonrpc":"2.0","id":9,"method":"echo","params":{"text":"ok"}}`, 0, 9.0},
	}
	for _, tc := range cases {
		d.Dispatch(context.Background(), c, []byte(tc.frame))
		got := c.last(t)
		require.Equal(t, tc.code, code(got), tc.frame)
		require.Equal(t, tc.id, got["id"], tc.frame)
		require.Equal(t, "2.0", got["jsonrpc"])
	}
	require.Equal(t, map[string]any{"text": "ok"}, c.last(t)["result"])
	n := len(c.frames)
	d.Dispatch(context.Background(), c, []byte(`{"jsonrpc":"2.0","method":"echo"}`))
	require.Len(t, c.frames, n, "a notification gets no reply")
}

func TestThenRunsAfterReply(t *testing.T) {
	t.Parallel()
	d := NewDispatcher()
	c := &memConn{done: make(chan struct{})}
	d.Handle("start", func(ctx context.Context, call *Call) (any, error) {
		return Then{Result: map[string]string{"status": "streaming"}, After: func() {
			_ = call.Conn.Send(EventFrame(Event{Type: "message.start", SessionID: "s1"}))
		}}, nil
	})
	d.Dispatch(context.Background(), c, []byte(`{"jsonrpc":"2.0","id":1,"method":"start"}`))
	require.Len(t, c.frames, 2)
	require.Equal(t, 1.0, c.frames[0]["id"], "the reply comes first")
	require.Equal(t, "event", c.frames[1]["method"])
	require.Equal(t, map[string]any{"type": "message.start", "session_id": "s1", "payload": map[string]any{}}, c.frames[1]["params"])
}

func TestServeLinesConcurrentAndOneFramePerLine(t *testing.T) {
	t.Parallel()
	d := testDispatcher()
	release := make(chan struct{})
	d.Handle("slow", func(ctx context.Context, c *Call) (any, error) {
		<-release
		return "slow done", nil
	})
	d.Handle("fast", func(ctx context.Context, c *Call) (any, error) {
		close(release) // only reachable while slow is still waiting
		return "fast done", nil
	})
	in := strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"slow"}` + "\n" +
		"garbage\n\n" +
		`{"jsonrpc":"2.0","id":2,"method":"fast"}` + "\n")
	pr, pw := io.Pipe()
	conn := NewLineConn(pw)
	var lines []map[string]any
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		dec := json.NewDecoder(pr)
		for {
			var m map[string]any
			if dec.Decode(&m) != nil {
				return
			}
			lines = append(lines, m)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, ServeLines(ctx, d, in, conn))
	pw.Close()
	<-readDone
	require.Len(t, lines, 3)
	byID := map[any]map[string]any{}
	for _, l := range lines {
		byID[l["id"]] = l
	}
	require.Equal(t, "slow done", byID[1.0]["result"])
	require.Equal(t, "fast done", byID[2.0]["result"])
	require.Equal(t, CodeParse, code(byID[nil]))
}

func TestOversizeFrame(t *testing.T) {
	t.Parallel()
	d := testDispatcher()
	big := `{"jsonrpc":"2.0","id":1,"method":"echo","params":{"text":"` + strings.Repeat("x", MaxLineFrame) + `"}}`
	in := strings.NewReader(big + "\n" + `{"jsonrpc":"2.0","id":2,"method":"echo","params":{"text":"after"}}` + "\n")
	var out strings.Builder
	conn := NewLineConn(&out)
	require.NoError(t, ServeLines(context.Background(), d, in, conn))
	got := out.String()
	require.Contains(t, got, `"code":-32700`)
	require.Contains(t, got, `"text":"after"`, "the stream stays in step after an oversize frame")
}

func TestAdmitRunsBeforeEveryHandler(t *testing.T) {
	t.Parallel()
	d := testDispatcher()
	var admitted, released []string
	d.SetAdmit(func(ctx context.Context, c *Call) (func(), error) {
		if strings.Contains(string(c.Params), "refuse") {
			return nil, &Error{Code: CodeTooBusy, Message: "too many requests in flight", Data: map[string]int{"retry_after_ms": 1000}}
		}
		admitted = append(admitted, c.Method)
		return func() { released = append(released, c.Method) }, nil
	})
	c := &memConn{done: make(chan struct{})}
	d.Dispatch(context.Background(), c, []byte(`{"jsonrpc":"2.0","id":1,"method":"echo","params":{"text":"hi"}}`))
	require.Equal(t, "hi", c.last(t)["result"].(map[string]any)["text"])
	require.Equal(t, []string{"echo"}, admitted)
	require.Equal(t, []string{"echo"}, released, "the slot is given back once the handler returned")
	d.Dispatch(context.Background(), c, []byte(`{"jsonrpc":"2.0","id":2,"method":"echo","params":{"text":"refuse"}}`))
	r := c.last(t)
	require.Equal(t, CodeTooBusy, code(r))
	require.EqualValues(t, 1000, r["error"].(map[string]any)["data"].(map[string]any)["retry_after_ms"])
	n := len(c.frames)
	d.Dispatch(context.Background(), c, []byte(`{"jsonrpc":"2.0","method":"echo","params":{"text":"refuse"}}`))
	require.Len(t, c.frames, n, "a refused notification gets no reply")
	d.Dispatch(context.Background(), c, []byte(`{"jsonrpc":"2.0","id":3,"method":"nope"}`))
	require.Equal(t, CodeMethodNotFound, code(c.last(t)))
	require.Equal(t, []string{"echo"}, admitted, "an unknown method is not admitted")
}

// A refusal is held back after the request gave its slot back, and the
// hold ends with the dispatch context.
func TestRefusalsAreHeldAfterTheSlotIsBack(t *testing.T) {
	t.Parallel()
	d := NewDispatcher()
	d.SetRefusalDelay(time.Hour)
	var mu sync.Mutex
	var order []string
	d.SetAdmit(func(ctx context.Context, c *Call) (func(), error) {
		return func() { mu.Lock(); order = append(order, "release"); mu.Unlock() }, nil
	})
	d.Handle("busy", func(ctx context.Context, c *Call) (any, error) {
		return nil, Errorf(CodeTooBusy, "too many turns in flight")
	})
	c := &memConn{done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		d.Dispatch(ctx, c, []byte(`{"jsonrpc":"2.0","id":1,"method":"busy"}`))
		mu.Lock()
		order = append(order, "replied")
		mu.Unlock()
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		n := len(order)
		mu.Unlock()
		if n > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the slot never came back")
	}
	c.mu.Lock()
	require.Empty(t, c.frames, "the refusal is held back")
	c.mu.Unlock()
	cancel()
	<-returned
	require.Equal(t, CodeTooBusy, code(c.last(t)))
	require.Equal(t, []string{"release", "replied"}, order)
}

// A connection's refusals wait longer the more of them it holds back at
// once (a client sending past its limits without waiting for the
// answers): the delay doubles every heldStep of them, up to 1<<maxHeldShift
// times; a lone refusal waits the delay as set. Every refusal held is let
// go with the dispatch context or the connection, and none is counted
// after.
func TestARefusalWaitsLongerTheMoreItsConnectionHolds(t *testing.T) {
	t.Parallel()
	base := 250 * time.Millisecond
	for held, want := range map[int]time.Duration{0: base, heldStep - 1: base, heldStep: 2 * base, 3 * heldStep: 8 * base,
		maxHeldShift * heldStep: 16 * base, 1000: 16 * base} {
		assert.Equal(t, want, refusalDelay(base, held), "%d held", held)
	}

	for _, ends := range []string{"dispatch context", "connection"} {
		t.Run(ends, func(t *testing.T) { heldUntil(t, ends) })
	}
}

// heldUntil holds 2*heldStep refusals on one connection, then ends the
// dispatch context or the connection: every refusal is let go.
func heldUntil(t *testing.T, ends string) {
	d := NewDispatcher()
	d.SetRefusalDelay(time.Hour)
	d.Handle("busy", func(ctx context.Context, c *Call) (any, error) {
		return nil, Errorf(CodeTooBusy, "too many requests in flight")
	})
	c := &memConn{done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	const sent = 2 * heldStep
	for i := range sent {
		wg.Add(1)
		go func() { // ends with ctx or the connection
			defer wg.Done()
			d.Dispatch(ctx, c, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"busy"}`, i+1))
		}()
	}
	heldNow := func() int {
		d.heldMu.Lock()
		defer d.heldMu.Unlock()
		return d.held[c.ID()]
	}
	for deadline := time.Now().Add(30 * time.Second); heldNow() < sent; time.Sleep(time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "%d of %d refusals held", heldNow(), sent)
	}
	if ends == "connection" {
		close(c.done) // the peer is gone: nobody is left to answer
	} else {
		cancel()
	}
	wg.Wait()
	cancel()
	c.mu.Lock()
	assert.Len(t, c.frames, sent, "every refusal answered once let go")
	c.mu.Unlock()
	d.heldMu.Lock()
	assert.Empty(t, d.held, "a connection's count outlived its refusals")
	d.heldMu.Unlock()
}
