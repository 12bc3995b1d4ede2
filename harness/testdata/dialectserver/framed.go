package main

// The dialect server's second transport, as real gateways have it: framed
// websocket messages at /frames (and on stdio with `stdio --framed`), and
// an OpenAI-compatible chat at /v1/chat/completions that selects the agent
// by model name, both under the one operator token.
//
// Frames: requests {type:"req", id, method, params}; replies
// {type:"res", id, ok, payload|error{code,message}}; events
// {type:"event", event, seq, sessionKey, payload}. The token goes in a
// connect request ({method:"connect", params:{token}}), the first request
// a websocket must send (after the hello event); the methods are the
// JSON-RPC transport's (open, say, shut).
//
// Chat: POST with "Authorization: Bearer <token>"; the model
// "dialect:<agent>" selects the profile (main, or a profile that does not
// exist, is the launch profile); the user field keys the session; the last
// user message is the prompt. The answer streams as SSE chunks (tools run
// on the server: the stream carries only the answer), and a failed turn as
// a chunk {"error":{...}}. DIALECT_LEAK=1 leaks here too: the answer's
// chunk carries the debug field the reply.done event would.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/gorilla/websocket"
)

// serveFramed adds the framed websocket and the chat to mux.
func serveFramed(ctx context.Context, mux *http.ServeMux, token string, wg *sync.WaitGroup) {
	mux.HandleFunc("/frames", func(w http.ResponseWriter, r *http.Request) {
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		c := framedConn(token,
			func(b []byte) error { return ws.WriteMessage(websocket.TextMessage, b) },
			func() ([]byte, error) {
				_, data, err := ws.ReadMessage()
				return data, err
			})
		c.serve(ctx, wg)
	})
	chat := &chatServer{token: token, sessions: map[string]*session{}}
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		wg.Add(1)
		defer wg.Done()
		chat.handle(w, r)
	})
}

// stdioFramed serves one framed connection on stdin and stdout, a frame a
// line; stdio needs no connect request.
func stdioFramed() error {
	return serveLines(func(write func([]byte) error, read func() ([]byte, error)) *conn {
		return framedConn("", write, read)
	})
}

// serveLines serves the conn mk makes of stdin and stdout, a frame a line,
// until stdin ends; its turns finish first.
func serveLines(mk func(write func([]byte) error, read func() ([]byte, error)) *conn) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
	c := mk(func(b []byte) error {
		_, err := os.Stdout.Write(append(b, '\n'))
		return err
	}, func() ([]byte, error) {
		if !sc.Scan() {
			if err := sc.Err(); err != nil {
				return nil, err
			}
			return nil, io.EOF
		}
		return sc.Bytes(), nil
	})
	var wg sync.WaitGroup
	defer stopPlugins()
	c.serve(ctx, &wg)
	wg.Wait()
	return nil
}

// framedConn is a conn whose frames are the envelope's: what it writes in
// JSON-RPC goes out framed, and what comes in framed it reads as JSON-RPC.
// With a token, every request but connect is refused until a connect
// request carried it.
func framedConn(token string, write func([]byte) error, read func() ([]byte, error)) *conn {
	c := &conn{sessions: map[string]*session{}}
	seq := 0
	c.write = func(b []byte) error {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Type      string         `json:"type"`
				SessionID string         `json:"session_id"`
				Payload   map[string]any `json:"payload"`
			} `json:"params"`
			Result any `json:"result"`
			Error  any `json:"error"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			return err
		}
		var out map[string]any
		if m.Method == "event" {
			seq++ // (under the conn's write lock)
			out = map[string]any{"type": "event", "event": m.Params.Type, "seq": seq, "payload": m.Params.Payload}
			if m.Params.SessionID != "" {
				out["sessionKey"] = m.Params.SessionID
			}
		} else {
			out = map[string]any{"type": "res", "id": m.ID, "ok": m.Error == nil}
			if m.Error != nil {
				out["error"] = m.Error
			} else {
				out["payload"] = m.Result
			}
		}
		f, _ := json.Marshal(out)
		return write(f)
	}
	connected := token == ""
	c.read = func() ([]byte, error) {
		for {
			data, err := read()
			if err != nil {
				return nil, err
			}
			var f struct {
				Type   string          `json:"type"`
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Params map[string]any  `json:"params"`
			}
			if json.Unmarshal(data, &f) != nil || f.Type != "req" {
				continue
			}
			switch {
			case f.Method == "connect":
				if got, _ := f.Params["token"].(string); token != "" && got != token {
					c.reply(f.ID, nil, 4010, "connect: bad token")
					continue
				}
				connected = true
				c.reply(f.ID, map[string]any{"protocol": 1, "server": "dialectserver"}, 0, "")
				continue
			case !connected:
				c.reply(f.ID, nil, 4010, "send connect with the token first")
				continue
			}
			return json.Marshal(map[string]any{"jsonrpc": "2.0", "id": f.ID, "method": f.Method, "params": f.Params})
		}
	}
	return c
}

// chatServer is the chat transport: sessions by agent and user field.
type chatServer struct {
	token    string
	mu       sync.Mutex
	sessions map[string]*session
}

func (cs *chatServer) handle(w http.ResponseWriter, r *http.Request) {
	fail := func(code int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg}})
		_, _ = w.Write(b)
	}
	if r.Method != http.MethodPost {
		fail(http.StatusMethodNotAllowed, "POST only")
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+cs.token {
		fail(http.StatusUnauthorized, "bad token")
		return
	}
	var body struct {
		Model    string           `json:"model"`
		User     string           `json:"user"`
		Messages []map[string]any `json:"messages"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 16<<20)).Decode(&body); err != nil {
		fail(http.StatusBadRequest, "bad body: "+err.Error())
		return
	}
	agent, ok := strings.CutPrefix(body.Model, "dialect:")
	if !ok {
		fail(http.StatusNotFound, fmt.Sprintf("model_not_found: %q (want dialect:<agent>)", body.Model))
		return
	}
	text := ""
	for _, m := range body.Messages {
		if m["role"] == "user" {
			text, _ = m["content"].(string)
		}
	}
	s := cs.session(agent, body.User)
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	var wmu sync.Mutex
	sse := func(v any) error {
		b, _ := json.Marshal(v)
		wmu.Lock()
		defer wmu.Unlock()
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": "chatcmpl-" + s.id, "object": "chat.completion.chunk", "model": body.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	// The turn's events, as the JSON-RPC transport would send them, become
	// the stream: the answer, or the error.
	tc := &conn{sessions: map[string]*session{}, write: func(b []byte) error {
		var ev struct {
			Params struct {
				Type    string         `json:"type"`
				Payload map[string]any `json:"payload"`
			} `json:"params"`
		}
		if err := json.Unmarshal(b, &ev); err != nil {
			return err
		}
		switch p := ev.Params.Payload; ev.Params.Type {
		case "reply.done":
			if p["state"] == "delta" {
				return nil // a step's report, not the answer
			}
			ch := chunk(map[string]any{"role": "assistant", "content": p["text"]}, nil)
			if d, ok := p["debug"]; ok {
				ch["debug"] = d
			}
			if err := sse(ch); err != nil {
				return err
			}
			return sse(chunk(map[string]any{}, "stop"))
		case "oops":
			return sse(map[string]any{"error": map[string]any{"message": p["message"], "type": "server_error"}})
		}
		return nil
	}}
	tc.turn(r.Context(), s, text)
	wmu.Lock()
	defer wmu.Unlock()
	_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
}

// session is the chat session of agent and user: one per pair, kept
// across requests (its first turn makes the metadata probe).
func (cs *chatServer) session(agent, user string) *session {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	key := agent + "\x00" + user
	if s := cs.sessions[key]; s != nil {
		return s
	}
	if agent == "main" {
		agent = ""
	}
	home, who := findAgent(agent)
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	s := &session{id: "c" + hex.EncodeToString(rnd[:]), home: home, profile: who}
	cs.sessions[key] = s
	return s
}
