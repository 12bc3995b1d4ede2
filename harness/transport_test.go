package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFramedTransportSpeaksTheDeclaredEnvelope drives a real websocket peer
// that speaks an envelope with none of the default field names (kind/op/
// args, numeric ids, string error codes, the session id inside the
// payload) and wants a connect request with the token in a header-less
// socket: calls map to replies by id, errors keep their code, events come
// by name with their session, and a bad token fails the dial.
func TestFramedTransportSpeaksTheDeclaredEnvelope(t *testing.T) {
	t.Parallel()
	const token = "op-token"
	var mu sync.Mutex
	var got []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/gw" || r.URL.RawQuery != "" {
			http.Error(w, "wrong path "+r.URL.String(), http.StatusNotFound)
			return
		}
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		send := func(v map[string]any) { b, _ := json.Marshal(v); _ = ws.WriteMessage(websocket.TextMessage, b) }
		send(map[string]any{"kind": "evt", "name": "challenge", "data": map[string]any{"nonce": "n1"}})
		connected := false
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				return
			}
			var f map[string]any
			if json.Unmarshal(data, &f) != nil {
				continue
			}
			mu.Lock()
			got = append(got, f)
			mu.Unlock()
			args, _ := f["args"].(map[string]any)
			res := func(ok bool, body map[string]any) {
				m := map[string]any{"kind": "ret", "seq": f["seq"], "success": ok}
				if ok {
					m["body"] = body
				} else {
					m["fault"] = body
				}
				send(m)
			}
			switch {
			case f["op"] == "hello":
				connected = args["auth"] == token
				if !connected {
					res(false, map[string]any{"code": "UNAUTHORIZED", "message": "bad token"})
					continue
				}
				res(true, map[string]any{})
			case !connected:
				res(false, map[string]any{"code": "UNAUTHORIZED", "message": "hello first"})
			case f["op"] == "open":
				res(true, map[string]any{"sid": "s-1"})
				send(map[string]any{"kind": "evt", "name": "done", "data": map[string]any{"meta": map[string]any{"sid": "s-1"}, "outcome": "ok"}})
			default:
				res(false, map[string]any{"code": -32601, "message": "no method " + fmt.Sprint(f["op"])})
			}
		}
	}))
	defer srv.Close()
	tr := Transport{Kind: TransportFramed, Path: "/gw", Auth: "none",
		Connect: &ConnectSpec{Method: "hello", Params: map[string]any{"auth": "{token}"}},
		Envelope: Envelope{Type: "kind", Request: "call", Response: "ret", Event: "evt", ID: "seq", IDType: "number",
			Method: "op", Params: "args", OK: "success", Result: "body", Error: "fault", Name: "name", Payload: "data", Session: "data.meta.sid"}}
	d := Dialect{Events: EventMap{Ready: "challenge"}, Transports: []Transport{tr},
		Methods: map[string]MethodSpec{"session.create": {Method: "open", Result: map[string]string{"session_id": "sid"}}}}
	ctx, c := dialDialect(t, srv.URL, token, d)
	s, err := c.CreateSession(ctx, "")
	require.NoError(t, err)
	assert.Equal(t, "s-1", s.SessionID)
	ev, err := c.WaitEvent(ctx, 0, "done", func(e Event) bool { return e.Type == "done" })
	require.NoError(t, err)
	assert.Equal(t, "s-1", ev.SessionID, "the session id at data.meta.sid")
	assert.Equal(t, "ok", ev.Payload["outcome"])
	err = c.Call(ctx, "cron.list", nil, nil)
	var rerr *RPCError
	require.ErrorAs(t, err, &rerr)
	assert.Equal(t, -32601, rerr.Code)
	mu.Lock()
	require.GreaterOrEqual(t, len(got), 2)
	assert.Equal(t, map[string]any{"kind": "call", "seq": float64(1), "op": "hello", "args": map[string]any{"auth": token}}, got[0],
		"the connect request, in the declared envelope with a number id")
	assert.Equal(t, "open", got[1]["op"])
	mu.Unlock()
	assert.Len(t, c.Frames(), 5, "challenge, the replies to hello, open and cron.list, done: every frame kept for the scan")

	// A posted request is mapped as a call is; its outcome comes to done.
	outcomes := make(chan error, 2)
	require.NoError(t, c.PostCreateSession("", func(err error) { outcomes <- err }))
	require.NoError(t, c.Post("cron.list", nil, func(err error) { outcomes <- err }))
	var posted []error
	for range 2 {
		select {
		case err := <-outcomes:
			posted = append(posted, err)
		case <-ctx.Done():
			t.Fatalf("posted requests: %v", ctx.Err())
		}
	}
	require.Len(t, posted, 2)
	var perr *RPCError
	require.True(t, posted[0] == nil && errors.As(posted[1], &perr) || posted[1] == nil && errors.As(posted[0], &perr), "%v", posted)
	assert.Equal(t, -32601, perr.Code)
	mu.Lock()
	assert.Equal(t, "open", got[len(got)-2]["op"], "session.create posted as the dialect's open")
	mu.Unlock()
	var unsupported *UnsupportedError
	hooked := d
	hooked.Methods = map[string]MethodSpec{"session.create": {Hook: []string{"true"}}}
	_, hc := dialDialect(t, srv.URL, token, hooked)
	require.ErrorAs(t, hc.PostCreateSession("", func(error) { t.Error("a hook is never posted") }), &unsupported)
	assert.Contains(t, unsupported.Reason, "hook")

	_, err = DialWebsocket(ctx, srv.URL, "wrong", WithDialect(d, nil))
	require.ErrorContains(t, err, "the connect request")
	assert.ErrorContains(t, err, "UNAUTHORIZED: bad token")
}

// TestChatTransportTurnsAreStreams drives a real HTTP server streaming SSE:
// the tenant is chosen by the model, user and header templates under one
// bearer token; a turn's content, tool calls and end come from the stream;
// an HTTP error and an error chunk fail the turn with the server's words;
// an operation the chat cannot express, or a session this connection did
// not open, is unsupported (never refused by the harness on the server's
// behalf).
func TestChatTransportTurnsAreStreams(t *testing.T) {
	t.Parallel()
	const token = "op-token"
	var mu sync.Mutex
	var bodies []map[string]any
	var agents []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, `{"error":{"message":"no such route or token"}}`, http.StatusUnauthorized)
			return
		}
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		bodies = append(bodies, body)
		agents = append(agents, r.Header.Get("X-Agent"))
		mu.Unlock()
		msgs, _ := body["messages"].([]any)
		text, _ := msgs[len(msgs)-1].(map[string]any)["content"].(string)
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		data := func(s string) { fmt.Fprintf(w, "data: %s\n\n", s); f.Flush() }
		switch text {
		case "fail":
			data(`{"error":{"message":"the agent crashed","type":"server_error"}}`)
			return
		}
		fmt.Fprint(w, ": keep-alive comment\n\n")
		data(`{"choices":[{"index":0,"delta":{"role":"assistant","content":"hel"}}]}`)
		data(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"exec","arguments":"{\"cmd\":"}}]}}]}`)
		data(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"ls\"}"}}]}}]}`)
		data(`{"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}`)
		data(`[DONE]`)
	}))
	defer srv.Close()
	tr := Transport{Kind: TransportChat, Chat: ChatSpec{Model: "gw:{agent}", User: "{agent}/{session_id}",
		Headers: map[string]string{"X-Agent": "{agent}"}, LaunchAgent: "boss"}}
	d := Dialect{Transports: []Transport{tr}, Events: EventMap{TurnEnd: "reply.done", ToolArgs: "step.end", ArgsField: "input", ToolField: "tool"},
		Methods: map[string]MethodSpec{"session.create": {Method: "open"}, "cron.create": {Method: "cron.add"}}}
	ctx, c := dialDialect(t, srv.URL, token, d)
	launch, err := c.CreateSession(ctx, "")
	require.NoError(t, err)
	alpha, err := c.CreateSession(ctx, "alpha")
	require.NoError(t, err)
	assert.Equal(t, "alpha", alpha.Info.ProfileName)
	end, err := c.Turn(ctx, alpha.SessionID, "hi")
	require.NoError(t, err)
	assert.Equal(t, "reply.done", end.Type)
	assert.Equal(t, "hello", end.Payload["text"])
	assert.Equal(t, []ToolCall{{Name: "exec", Args: map[string]any{"cmd": "ls"}}}, c.ToolCalls(alpha.SessionID, 0), "tool calls from the stream")
	_, err = c.Turn(ctx, launch.SessionID, "hi")
	require.NoError(t, err)
	mu.Lock()
	require.Len(t, bodies, 2)
	assert.Equal(t, "gw:alpha", bodies[0]["model"])
	assert.Equal(t, "alpha/"+alpha.SessionID, bodies[0]["user"])
	assert.Equal(t, true, bodies[0]["stream"])
	assert.Equal(t, "gw:boss", bodies[1]["model"], "the launch profile is launch_agent")
	assert.Equal(t, []string{"alpha", "boss"}, agents)
	mu.Unlock()
	assert.Len(t, c.Frames(), 8, "every data chunk of both streams is a frame the scan sees")

	_, err = c.Turn(ctx, alpha.SessionID, "fail")
	assert.ErrorContains(t, err, "the agent crashed")

	var uerr *UnsupportedError
	err = c.Call(ctx, "cron.create", map[string]any{"name": "x"}, nil)
	require.ErrorAs(t, err, &uerr, "a method the chat cannot express")
	assert.Contains(t, uerr.Reason, `method "cron.add"`)
	err = c.Call(ctx, "profiles.list", nil, nil)
	require.ErrorAs(t, err, &uerr, "an unmapped operation")
	_, err = c.Turn(ctx, "someone-elses-session", "hi")
	require.ErrorAs(t, err, &uerr, "a session this connection did not open never reaches the server")
	require.NoError(t, c.Call(ctx, "session.close", map[string]any{"session_id": alpha.SessionID}, nil))

	bad, err := DialWebsocket(ctx, srv.URL, "wrong", WithDialect(d, nil))
	require.NoError(t, err, "a chat opens nothing until a turn")
	defer bad.Close()
	s, err := bad.CreateSession(ctx, "")
	require.NoError(t, err)
	_, err = bad.Turn(ctx, s.SessionID, "hi")
	assert.ErrorContains(t, err, "HTTP 401")
	assert.ErrorContains(t, err, "no such route or token")
}

// TestChatTransportCloseEndsTurnsInFlight: Close cancels a stream that
// never ends and returns once its reader is gone; the turn fails as closed.
func TestChatTransportCloseEndsTurnsInFlight(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n")
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done()
	}))
	defer srv.Close()
	d := Dialect{Transports: []Transport{{Kind: TransportChat}}}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := DialWebsocket(ctx, srv.URL, "t", WithDialect(d, nil))
	require.NoError(t, err)
	s, err := c.CreateSession(ctx, "")
	require.NoError(t, err)
	turn := make(chan error, 1)
	go func() { _, err := c.Turn(ctx, s.SessionID, "hang"); turn <- err }()
	<-started
	c.Close()
	err = <-turn
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrClosed) || strings.Contains(err.Error(), "context canceled"), "got %v", err)
	err = c.Call(ctx, "prompt.submit", map[string]any{"session_id": s.SessionID, "text": "again"}, nil)
	assert.ErrorIs(t, err, ErrClosed)
}

func TestTransportsNameEveryProblem(t *testing.T) {
	t.Parallel()
	requireLoadFails(t, `
dialect:
  transports:
    - {kind: grpc}
    - {kind: framed, path: ws, envelope: {id_type: uuid}, connect: {params: {t: "{tokn}"}}}
    - {kind: chat, auth: query, chat: {model: "m:{agnt}"}, envelope: {type: t}}
    - {kind: jsonrpc, chat: {user: u}}
`,
		`transports[0].kind "grpc"`, `transports[1].path "ws"`, `id_type "uuid"`, "transports[1].connect: give the method",
		"{tokn}", "transports[2].auth", "{agnt}", "transports[2]: envelope and connect belong to a framed transport",
		"transports[3]: chat belongs to a chat transport",
	)
	d := Dialect{}
	assert.Equal(t, []Transport{Transport{Kind: TransportJSONRPC}.WithDefaults()}, d.TransportList(), "none declared: JSON-RPC")
	d.Transports = []Transport{{Kind: TransportChat}, {Kind: TransportFramed}}
	assert.Equal(t, TransportFramed, d.stdioTransport().Kind, "stdio speaks the first transport that is not chat")
}

// dialDialect validates d and dials base with it, failing the test on an
// error; the connection closes with the test.
func dialDialect(t *testing.T, base, token string, d Dialect) (context.Context, *Conn) {
	t.Helper()
	require.Empty(t, d.validate())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	c, err := DialWebsocket(ctx, base, token, WithDialect(d, nil))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return ctx, c
}
