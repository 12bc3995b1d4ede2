package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/tenantcanary/tenantcanary/internal/placeholder"
)

// envelope is a framed transport's wire format: one JSON object a message,
// its fields named by the target file (Envelope, with defaults).
type envelope struct{ e Envelope }

func (w envelope) encode(id int64, method string, params any) ([]byte, error) {
	var idv any = strconv.FormatInt(id, 10)
	if w.e.IDType == "number" {
		idv = id
	}
	m := map[string]any{w.e.Type: w.e.Request, w.e.ID: idv, w.e.Method: method}
	if params != nil {
		m[w.e.Params] = params
	}
	return json.Marshal(m)
}

func (w envelope) decode(raw []byte) (inbound, error) {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return inbound{}, err
	}
	switch kind, _ := m[w.e.Type].(string); kind {
	case w.e.Event:
		name, _ := m[w.e.Name].(string)
		payload, _ := m[w.e.Payload].(map[string]any)
		sid := ""
		if v, ok := getPath(m, w.e.Session); ok {
			sid, _ = v.(string)
		}
		return inbound{event: &Event{Type: name, SessionID: sid, Payload: payload}}, nil
	case w.e.Response:
		id, ok := frameID(m[w.e.ID])
		if !ok {
			return inbound{}, nil
		}
		in := inbound{reply: true, id: id}
		okv, hasOK := m[w.e.OK].(bool)
		if e, has := m[w.e.Error]; (has && e != nil) || (hasOK && !okv) {
			in.err = frameError(e)
			return in, nil
		}
		in.result, _ = json.Marshal(m[w.e.Result])
		return in, nil
	}
	return inbound{}, nil
}

// frameID reads an id the harness sent, echoed as a number or a string.
func frameID(v any) (int64, bool) {
	switch x := v.(type) {
	case float64:
		return int64(x), x == float64(int64(x))
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	}
	return 0, false
}

// frameError reads a framed reply's error: {code, message} with a number
// or a string code (the string goes in front of the message), or a string.
func frameError(v any) *RPCError {
	switch x := v.(type) {
	case string:
		return &RPCError{Message: x}
	case map[string]any:
		e := &RPCError{}
		e.Message, _ = x["message"].(string)
		switch c := x["code"].(type) {
		case float64:
			e.Code = int(c)
		case string:
			e.Message = c + ": " + e.Message
		}
		if e.Message == "" {
			b, _ := json.Marshal(x)
			e.Message = string(b)
		}
		return e
	}
	return &RPCError{Message: "the reply is not ok, and carries no error"}
}

// connect sends a framed transport's opening request (Transport.Connect)
// with the connection's token.
func (c *RPC) connect(ctx context.Context, t Transport, token string) error {
	if t.Connect == nil {
		return nil
	}
	params, _ := placeholder.Value(t.Connect.Params, map[string]any{"token": token})
	if err := c.call(ctx, 0, t.Connect.Method, params, nil); err != nil {
		return fmt.Errorf("%s: the connect request (dialect.transports[].connect): %w", t.Label(), err)
	}
	return nil
}
