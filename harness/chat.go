package harness

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/tenantcanary/tenantcanary/internal/dotpath"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/tenantcanary/tenantcanary/internal/placeholder"
)

// chatClient is a chat transport's side of a connection: sessions are the
// harness's (an id and the profile it addresses), a turn is one streaming
// chat request whose chunks are the connection's frames, and whose
// content, tool calls and end become the dialect's events.
type chatClient struct {
	rpc   *RPC
	url   string
	token string
	t     Transport
	http  *http.Client

	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	closed   bool
	turns    sync.WaitGroup
	sessions map[string]string // session id -> {agent}
}

// dialChat makes c a chat connection to base: nothing is opened until a
// turn; Close cancels every turn in flight and waits for it.
func dialChat(c *Conn, base, token string, t Transport) {
	ctx, cancel := context.WithCancel(context.Background())
	cc := &chatClient{rpc: c.RPC, url: strings.TrimSuffix(base, "/") + t.Path, token: token, t: t,
		http: &http.Client{}, ctx: ctx, cancel: cancel, sessions: map[string]string{}}
	c.chat = cc
	c.send = func([]byte) error { return errors.New("a chat transport sends no raw frames") }
	c.closeFn = func() {
		cc.mu.Lock()
		cc.closed = true
		cc.mu.Unlock()
		cancel()
		cc.turns.Wait()
		close(c.readDone)
	}
}

// call performs a built-in operation (chatBuiltins) with logical params p.
func (cc *chatClient) call(ctx context.Context, op string, p map[string]any, result any) error {
	var reply any
	switch op {
	case "session.create":
		profile, _ := p["profile"].(string)
		agent := profile
		if agent == "" {
			agent = cc.t.Chat.LaunchAgent
		}
		var b [12]byte
		_, _ = rand.Read(b[:])
		sid := "chat-" + hex.EncodeToString(b[:])
		cc.mu.Lock()
		cc.sessions[sid] = agent
		cc.mu.Unlock()
		reply = map[string]any{"session_id": sid, "info": map[string]any{"profile_name": profile}}
	case "session.close":
		sid, _ := p["session_id"].(string)
		cc.mu.Lock()
		_, ok := cc.sessions[sid]
		delete(cc.sessions, sid)
		cc.mu.Unlock()
		if !ok {
			return errForeignChatSession(op, sid)
		}
		reply = map[string]any{"ok": true}
	case "prompt.submit":
		sid, _ := p["session_id"].(string)
		text, _ := p["text"].(string)
		cc.mu.Lock()
		agent, ok := cc.sessions[sid]
		closed := cc.closed
		if ok && !closed {
			cc.turns.Add(1)
		}
		cc.mu.Unlock()
		switch {
		case closed:
			return fmt.Errorf("%s: %w", op, ErrClosed)
		case !ok:
			return errForeignChatSession(op, sid)
		}
		req, err := cc.request(sid, agent, text)
		if err != nil {
			cc.turns.Done()
			return fmt.Errorf("%s: %w", op, err)
		}
		go func() {
			defer cc.turns.Done()
			cc.turn(sid, req)
		}()
		reply = map[string]any{"status": "streaming"}
	default:
		return &UnsupportedError{Op: op, Reason: "the chat transport does not do it"}
	}
	if result == nil {
		return nil
	}
	b, _ := json.Marshal(reply)
	return json.Unmarshal(b, result)
}

// errForeignChatSession is a call naming a session this chat connection
// did not open: a chat's sessions are the harness's own (an agent and a
// key), so the call cannot reach the server, and a probe sending it must
// not pass as refused.
func errForeignChatSession(op, sid string) error {
	return &UnsupportedError{Op: op, Reason: fmt.Sprintf("the chat transport's sessions are the harness's own: session %q was not opened on this connection, so there is nothing to send the server", sid)}
}

// request is the chat request of one turn of session sid.
func (cc *chatClient) request(sid, agent, text string) (*http.Request, error) {
	vars := map[string]any{"agent": agent, "session_id": sid}
	str := func(tmpl string) string {
		v, _ := placeholder.Value(tmpl, vars)
		s, _ := v.(string)
		return s
	}
	body := map[string]any{"model": str(cc.t.Chat.Model), "stream": true,
		"messages": []any{map[string]any{"role": "user", "content": text}}}
	if u := str(cc.t.Chat.User); u != "" {
		body["user"] = u
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(cc.ctx, http.MethodPost, cc.url, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	for k, v := range cc.t.Chat.Headers {
		req.Header.Set(k, str(v))
	}
	switch a := strings.ToLower(cc.t.Auth); a {
	case "none":
	case "bearer":
		req.Header.Set("Authorization", "Bearer "+cc.token)
	default:
		req.Header.Set(cc.t.Auth, cc.token)
	}
	return req, nil
}

// turn runs one chat request and turns what comes back into events of
// session sid: message.delta for content, the dialect's tool-arguments
// event for each streamed tool call, and the turn's end (or its error
// event). A reply that is not a stream (application/json) is one chunk.
func (cc *chatClient) turn(sid string, req *http.Request) {
	em := cc.rpc.eventMap()
	emit := func(raw []byte, typ string, payload map[string]any) {
		cc.rpc.record(raw, &Event{Type: typ, SessionID: sid, Payload: payload})
	}
	failed := func(raw []byte, msg string) {
		if raw == nil {
			raw, _ = json.Marshal(map[string]any{"error": map[string]any{"message": msg}})
		}
		emit(raw, em.Error, map[string]any{"message": msg})
	}
	resp, err := cc.http.Do(req)
	if err != nil {
		failed(nil, fmt.Sprintf("POST %s: %v", cc.t.Path, err))
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		cc.rpc.record(body, nil)
		failed(nil, fmt.Sprintf("POST %s: HTTP %d %s", cc.t.Path, resp.StatusCode, truncate(strings.TrimSpace(string(body)), 300)))
		return
	}
	var text strings.Builder
	calls := map[int]*chatToolCall{}
	take := func(raw []byte) (done bool) {
		var chunk struct {
			Error   any `json:"error"`
			Choices []struct {
				Delta   chatDelta `json:"delta"`
				Message chatDelta `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(raw, &chunk); err != nil {
			cc.rpc.record(raw, nil)
			return false
		}
		if chunk.Error != nil {
			failed(raw, fmt.Sprint(frameError(chunk.Error).Message))
			return true
		}
		cc.rpc.record(raw, nil)
		for _, ch := range chunk.Choices {
			for _, d := range []chatDelta{ch.Delta, ch.Message} {
				if d.Content != "" {
					text.WriteString(d.Content)
					cc.rpc.record(nil, &Event{Type: "message.delta", SessionID: sid, Payload: map[string]any{"text": d.Content}, Raw: raw})
				}
				for _, tc := range d.ToolCalls {
					c := calls[tc.Index]
					if c == nil {
						c = &chatToolCall{}
						calls[tc.Index] = c
					}
					c.name += tc.Function.Name
					c.args += tc.Function.Arguments
				}
			}
		}
		return false
	}
	if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/json") {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		if take(body) {
			return
		}
	} else {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data:")
			if !ok {
				continue
			}
			data = strings.TrimSpace(data)
			if data == "[DONE]" {
				break
			}
			if take([]byte(data)) {
				return
			}
		}
		if err := sc.Err(); err != nil {
			failed(nil, fmt.Sprintf("POST %s: the stream broke: %v", cc.t.Path, err))
			return
		}
	}
	for _, i := range slices.Sorted(maps.Keys(calls)) {
		c := calls[i]
		var args map[string]any
		_ = json.Unmarshal([]byte(c.args), &args)
		payload := map[string]any{}
		dotpath.Set(payload, em.ToolField, c.name)
		dotpath.Set(payload, em.ArgsField, args)
		cc.rpc.record(nil, &Event{Type: em.ToolArgs, SessionID: sid, Payload: payload, Raw: []byte(c.args)})
	}
	end := map[string]any{"text": text.String()}
	if em.TurnEndField != "" && len(em.TurnEndValues) > 0 {
		dotpath.Set(end, em.TurnEndField, em.TurnEndValues[0])
	}
	dotpath.Set(end, em.Status, em.StatusOK)
	raw, _ := json.Marshal(end)
	cc.rpc.record(nil, &Event{Type: em.TurnEnd, SessionID: sid, Payload: end, Raw: raw})
}

type chatDelta struct {
	Content   string `json:"content"`
	ToolCalls []struct {
		Index    int `json:"index"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

type chatToolCall struct{ name, args string }
