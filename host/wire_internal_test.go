package host

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestReadFrameLimit(t *testing.T) {
	t.Parallel()
	br := bufio.NewReaderSize(strings.NewReader(strings.Repeat("x", 100)+"\n{}\n"), 16)
	_, err := readFrame(br, 50)
	require.ErrorIs(t, err, ErrFrameTooLarge)
	require.Contains(t, err.Error(), "more than 50 bytes")

	br = bufio.NewReaderSize(strings.NewReader(strings.Repeat("y", 40)+"\n"), 16)
	line, err := readFrame(br, 50)
	require.NoError(t, err, "a frame longer than the buffer but within the limit is read whole")
	require.Equal(t, strings.Repeat("y", 40)+"\n", string(line))
}

// pair connects two conns over in-memory pipes.
func pair(t *testing.T, maxFrame int, aHandle, bHandle func(*conn, *Frame)) (*conn, *conn) {
	t.Helper()
	ar, bw := io.Pipe()
	br, aw := io.Pipe()
	var a, b *conn
	a = newConn("side a", ar, aw, maxFrame, func(f *Frame) { aHandle(a, f) })
	b = newConn("side b", br, bw, maxFrame, func(f *Frame) { bHandle(b, f) })
	a.start()
	b.start()
	t.Cleanup(func() {
		a.fail(ErrClosed)
		b.fail(ErrClosed)
		_ = ar.Close()
		_ = br.Close()
		a.wait()
		b.wait()
	})
	return a, b
}

func TestRequestsCrossBothWaysWithTheirOwnIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	echo := func(c *conn, f *Frame) { c.reply(ctx, f.ID, resultBody{f.Op + ":" + f.Session}, nil) }
	// b answers a's request only after asking a something itself (nesting
	// on the same pipes).
	var a, b *conn
	a, b = pair(t, DefaultMaxFrame, echo, func(c *conn, f *Frame) {
		inner, err := c.request(ctx, &Frame{Op: "inner"}, "")
		if err != nil {
			c.reply(ctx, f.ID, nil, err)
			return
		}
		c.reply(ctx, f.ID, resultBody{"outer(" + string(inner) + ")"}, nil)
	})
	raw, err := a.request(ctx, &Frame{Op: "outer", Session: "s"}, "s")
	require.NoError(t, err)
	var r resultBody
	require.NoError(t, json.Unmarshal(raw, &r))
	require.Equal(t, `outer({"result":"inner:"})`, r.Result)
	require.Equal(t, uint64(1), a.nextID.Load())
	require.Equal(t, uint64(1), b.nextID.Load(), "each side numbers its own requests")
}

func TestTypedErrorsCrossTheWire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	errs := map[string]error{"timeout": ErrTimeout, "unsupported": ErrUnsupported, "plugin": errors.New("boom"), "stale": ErrStaleRef}
	a, _ := pair(t, DefaultMaxFrame, nil, func(c *conn, f *Frame) { c.reply(ctx, f.ID, nil, errs[f.Op]) })
	for op, want := range map[string]error{"timeout": ErrTimeout, "unsupported": ErrUnsupported, "plugin": ErrPlugin, "stale": ErrStaleRef} {
		_, err := a.request(ctx, &Frame{Op: op}, "")
		require.ErrorIs(t, err, want, op)
	}
}

func TestOversizedFramesAreRefusedBothWays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := pair(t, 120, nil, func(c *conn, f *Frame) { c.reply(ctx, f.ID, resultBody{strings.Repeat("z", 200)}, nil) })
	_, err := a.request(ctx, &Frame{Op: "x", Body: json.RawMessage(`"` + strings.Repeat("q", 200) + `"`)}, "")
	require.ErrorIs(t, err, ErrFrameTooLarge, "the sender refuses to send it")
	_, err = a.request(ctx, &Frame{Op: "x"}, "")
	require.ErrorIs(t, err, ErrUnsupported, "a reply too large to send arrives as an error")
	require.Contains(t, err.Error(), "frame limit of 120 bytes")
	require.NoError(t, b.broken())
}

func TestGarbageBreaksTheConnectionWithAProtocolError(t *testing.T) {
	t.Parallel()
	r, w := io.Pipe()
	c := newConn("peer", r, io.Discard, 0, func(*Frame) {})
	c.start()
	go func() { _, _ = w.Write([]byte("not json\n")) }()
	c.wait()
	require.ErrorIs(t, c.broken(), ErrProtocol)
	_, err := c.request(context.Background(), &Frame{Op: "x"}, "")
	require.ErrorIs(t, err, ErrProtocol)
}

func TestRequestTimesOutAndTellsThePeer(t *testing.T) {
	t.Parallel()
	cancelled := make(chan uint64, 1)
	a, _ := pair(t, DefaultMaxFrame, nil, func(c *conn, f *Frame) {
		if f.Op == opCancel {
			var b cancelBody
			_ = json.Unmarshal(f.Body, &b)
			cancelled <- b.ID
		}
		// never replies to anything else
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := a.request(ctx, &Frame{Op: "hang"}, "")
	require.ErrorIs(t, err, ErrTimeout)
	select {
	case id := <-cancelled:
		require.Equal(t, uint64(1), id)
	case <-time.After(10 * time.Second):
		t.Fatal("the peer was never told to cancel")
	}
}

func TestStaleReferencesNeverReachANewGeneration(t *testing.T) {
	t.Parallel()
	g := newRegistry(2, true, nil, nil)
	g.hooks[1] = &hookEntry{plugin: "p", event: "e", fn: func(context.Context, map[string]any) error { return nil }}
	require.NoError(t, g.runHook(context.Background(), Ref{Gen: 2, ID: 1}, nil), "positive control")
	err := g.runHook(context.Background(), Ref{Gen: 1, ID: 1}, nil)
	require.ErrorIs(t, err, ErrStaleRef)
	_, err = g.callProvider(context.Background(), providerArgs{Ref: Ref{Gen: 1, ID: 1}, Method: "prefetch"})
	require.ErrorIs(t, err, ErrStaleRef)
}

// The hand-written frame encoder writes what encoding/json writes.
func TestAppendFrameMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	frames := []Frame{
		{},
		{ID: 1, Op: opCall, Session: "s", TimeoutMS: 30000, Body: mustJSON(callBody{Tool: "t", Args: map[string]any{"a": "<b>&\"c\"\n", "n": 1.5}})},
		{Re: 7, Body: mustJSON(resultBody{"ok"})},
		{Re: 8, Err: &Error{Code: CodePlugin, Message: "tool \"x\" failed:\t\x01 ünïcödé \u2028 <html> & \\"}},
		{ID: 1<<64 - 1, Parent: 42, Op: opDispatch, Session: "sess\x7f\xff", TimeoutMS: -3},
	}
	for _, f := range frames {
		want, err := json.Marshal(&f)
		require.NoError(t, err)
		require.Equal(t, string(want), string(appendFrame(nil, &f)))
	}
}

// The hand-written frame decoder agrees with encoding/json on what it
// takes, and leaves everything else (errors included) to encoding/json.
func TestDecodeFrameMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	fast := 0
	for _, l := range decodeFrameLines {
		var want Frame
		werr := json.Unmarshal([]byte(l), &want)
		var got Frame
		if decodeFrame([]byte(l+"\n"), &got) {
			fast++
			require.NoError(t, werr, "decoded %s, which encoding/json refuses", l)
			require.Equal(t, want, got, l)
		}
	}
	require.GreaterOrEqual(t, fast, 6, "the fast path took the frames it is for")
}

// decodeFrameLines are frames the fast decoder takes and frames it must
// leave to encoding/json; FuzzDecodeFrame starts from them.
var decodeFrameLines = []string{
	`{}`,
	`{"id":1,"op":"call","session":"s","timeout_ms":30000,"body":{"tool":"t","args":{"a":"x\"}","b":[1,{"c":null}]}}}`,
	`{"re":7,"body":{"result":"ok"}}`,
	`{"re":7,"body":"a string"}`,
	`{"re":7,"body":null}`,
	`{"re":7,"body":12.5}`,
	`{"id":18446744073709551615,"parent":42,"op":"dispatch","timeout_ms":-3}`,
	`{"re":8,"err":{"code":"plugin","message":"boom"}}`,
	`{"id":1,"id":2}`,
	`{"op":"caf\u00e9"}`,
	`{"unknown":1,"id":3}`,
	` {"id":1}`,
	`{"id":1 }`,
	`{"id":01}`,
	`{"id":-1}`,
	`{"id":1.5}`,
	`{"id":18446744073709551616}`,
	`{"id":"1"}`,
	`{"body":{"a":}}`,
	`{"body":}`,
	`{"body":[1,2}`,
	`{"body":{"a":1}`,
	`{"op":"x"`,
	`{"op":"x"}}`,
	`{"op":"x",}`,
	`{"timeout_ms":-}`,
	`not json`,
}
