package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
)

// JSON-RPC error codes: JSON-RPC's own, then the protocol's.
const (
	codeParse          = -32700
	codeInvalidRequest = -32600
	codeNoMethod       = -32601
	codeBadParams      = -32602
	codeInternal       = -32603
	codeNotYours       = 4030 // a session of another connection
	codeUnknownSession = 4044
	codeUnknownProfile = 4064
	codeConflict       = 4090 // busy, or already exists
)

// rpcError is an error reply.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("%s (code %d)", e.Message, e.Code) }

func errorf(code int, format string, args ...any) *rpcError {
	return &rpcError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// conn is one client connection: a stdio pipe or a websocket. It owns the
// sessions it opens; their events go to it alone.
type conn struct {
	pool  *pool
	ctx   context.Context // ends when the server stops
	write func([]byte) error

	wmu   sync.Mutex // one frame at a time
	turns sync.WaitGroup
}

type request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

// serve greets the client, then answers every frame read returns until it
// returns an error (the client went away). The connection's turns finish,
// and its sessions close, before serve returns.
func (c *conn) serve(read func() ([]byte, error)) {
	defer c.pool.dropSessionsOf(c)
	defer c.turns.Wait()
	c.event("gateway.ready", "", map[string]any{"server": "tinyagent"})
	for {
		data, err := read()
		if err != nil {
			return
		}
		var req request
		if err := json.Unmarshal(data, &req); err != nil {
			c.reply(nil, nil, errorf(codeParse, "bad JSON: %v", err))
			continue
		}
		if req.Method == "" || len(req.ID) == 0 {
			c.reply(req.ID, nil, errorf(codeInvalidRequest, "want a request with an id and a method"))
			continue
		}
		h, ok := methods[req.Method]
		if !ok {
			c.reply(req.ID, nil, errorf(codeNoMethod, "method not found: %s", req.Method))
			continue
		}
		result, err := h(c, req.Params)
		c.reply(req.ID, result, err)
	}
}

func (c *conn) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("tinyagent: a frame that does not encode: %v", err)) // every frame is maps and strings
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.write(b) // a client that went away reads nothing more; its reader ends the connection
}

func (c *conn) reply(id json.RawMessage, result any, err error) {
	if id == nil {
		id = json.RawMessage("null")
	}
	m := map[string]any{"jsonrpc": "2.0", "id": id}
	if err != nil {
		var re *rpcError
		if !errors.As(err, &re) {
			re = &rpcError{Code: codeInternal, Message: err.Error()}
		}
		m["error"] = re
	} else {
		m["result"] = result
	}
	c.send(m)
}

// event sends one event; sid is "" outside a session.
func (c *conn) event(typ, sid string, payload map[string]any) {
	if payload == nil {
		payload = map[string]any{}
	}
	c.send(map[string]any{"jsonrpc": "2.0", "method": "event",
		"params": map[string]any{"type": typ, "session_id": sid, "payload": payload}})
}

// decode reads a method's params into v; bad params are error -32602.
func decode(params json.RawMessage, v any) error {
	if len(params) == 0 || string(params) == "null" {
		return nil
	}
	if err := json.Unmarshal(params, v); err != nil {
		return errorf(codeBadParams, "bad params: %v", err)
	}
	return nil
}
