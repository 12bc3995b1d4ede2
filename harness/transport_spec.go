package harness

import (
	"fmt"
	"strings"

	"github.com/tenantcanary/tenantcanary/internal/placeholder"
)

// Transport kinds of Transport.Kind.
const (
	// TransportJSONRPC is DESIGN.md's wire: JSON-RPC 2.0, one object a
	// message, events as method "event" notifications.
	TransportJSONRPC = "jsonrpc"
	// TransportFramed is framed websocket (or stdio) messages with a
	// declared envelope: a field naming each frame's kind (request, reply,
	// event), the id, the method, the params, the reply's payload or
	// error, the event's name and payload.
	TransportFramed = "framed"
	// TransportChat is an OpenAI-compatible HTTP chat (SSE streaming)
	// under one token, the tenant chosen by model name, a header or the
	// user field: a turn is one chat request, its events come from the
	// stream (and its tool calls from the tenant's provider).
	TransportChat = "chat"
)

// Transport is one way a target's serve backend is spoken to. A dialect
// declares its transports in order: the first drives the catalog (and the
// stdio backend speaks the first that is not chat), and `canary-run target
// check` walks them all. None declared is JSON-RPC 2.0 at /api/ws?token=T.
type Transport struct {
	// Kind is jsonrpc, framed or chat.
	Kind string `yaml:"kind"`
	// Path is the websocket's path (/api/ws) or the chat's
	// (/v1/chat/completions).
	Path string `yaml:"path"`
	// Auth is how the token goes along: query (?token=, the websocket's
	// default), bearer (the chat's default), none (the connect request
	// carries it), or the name of a header.
	Auth string `yaml:"auth"`
	// Envelope is a framed transport's field names.
	Envelope Envelope `yaml:"envelope"`
	// Connect, when set, is the request a framed connection sends once
	// open (after the ready event, when there is one); its params take
	// {token}. A reply that is not ok fails the connection.
	Connect *ConnectSpec `yaml:"connect"`
	// Chat is a chat transport's request shape.
	Chat ChatSpec `yaml:"chat"`
}

// Envelope names the fields of a framed transport's messages. Every field
// left out takes the default in brackets: requests are
// {type:"req", id, method, params}, replies {type:"res", id, ok,
// payload|error{code,message}}, events {type:"event", event, payload}.
type Envelope struct {
	Type     string `yaml:"type"`     // the field naming a frame's kind (type)
	Request  string `yaml:"request"`  // its value on a request (req)
	Response string `yaml:"response"` // on a reply (res)
	Event    string `yaml:"event"`    // on an event (event)
	ID       string `yaml:"id"`       // the id field (id)
	IDType   string `yaml:"id_type"`  // string (the default) or number
	Method   string `yaml:"method"`   // a request's method (method)
	Params   string `yaml:"params"`   // a request's params (params)
	OK       string `yaml:"ok"`       // a reply's success flag (ok); a reply without it succeeds unless it has an error
	Result   string `yaml:"result"`   // a reply's payload (payload)
	Error    string `yaml:"error"`    // a reply's error, an object with code and message, or a string (error)
	Name     string `yaml:"name"`     // an event's name (event)
	Payload  string `yaml:"payload"`  // an event's payload (payload)
	// Session is the dotted path, from the frame's top, of the session id
	// an event belongs to (payload.session_id).
	Session string `yaml:"session"`
}

// ConnectSpec is a framed connection's opening request.
type ConnectSpec struct {
	Method string         `yaml:"method"`
	Params map[string]any `yaml:"params"`
}

// ChatSpec is how a chat transport addresses a tenant. Model, User and
// Headers are templates of {agent} (the session's profile; LaunchAgent for
// the launch profile) and {session_id} (the harness's id of the session,
// stable across its turns).
type ChatSpec struct {
	Model       string            `yaml:"model"`        // the model field ({agent})
	User        string            `yaml:"user"`         // the user field, left out when empty
	Headers     map[string]string `yaml:"headers"`      // extra headers
	LaunchAgent string            `yaml:"launch_agent"` // {agent} of the launch profile (main)
}

// chatBuiltins are the logical operations a chat transport performs
// itself; every other one needs a hook or is unsupported there.
var chatBuiltins = map[string]bool{"session.create": true, "prompt.submit": true, "session.close": true}

// Label names t in messages: its kind and path.
func (t Transport) Label() string {
	t = t.WithDefaults()
	switch t.Kind {
	case TransportChat:
		return "chat POST " + t.Path
	case TransportFramed:
		return "framed websocket " + t.Path
	}
	return "JSON-RPC websocket " + t.Path
}

// WithDefaults fills every empty field with its default.
func (t Transport) WithDefaults() Transport {
	fill := fillDefault
	fill(&t.Kind, TransportJSONRPC)
	if t.Kind == TransportChat {
		fill(&t.Path, "/v1/chat/completions")
		fill(&t.Auth, "bearer")
		fill(&t.Chat.Model, "{agent}")
		fill(&t.Chat.LaunchAgent, "main")
		return t
	}
	fill(&t.Path, "/api/ws")
	fill(&t.Auth, "query")
	e := &t.Envelope
	fill(&e.Type, "type")
	fill(&e.Request, "req")
	fill(&e.Response, "res")
	fill(&e.Event, "event")
	fill(&e.ID, "id")
	fill(&e.IDType, "string")
	fill(&e.Method, "method")
	fill(&e.Params, "params")
	fill(&e.OK, "ok")
	fill(&e.Result, "payload")
	fill(&e.Error, "error")
	fill(&e.Name, "event")
	fill(&e.Payload, "payload")
	fill(&e.Session, "payload.session_id")
	return t
}

// TransportList is the dialect's transports, JSON-RPC alone when it
// declares none.
func (d Dialect) TransportList() []Transport {
	if len(d.Transports) == 0 {
		return []Transport{Transport{Kind: TransportJSONRPC}.WithDefaults()}
	}
	out := make([]Transport, len(d.Transports))
	for i, t := range d.Transports {
		out[i] = t.WithDefaults()
	}
	return out
}

// stdioTransport is what a stdio backend speaks: the first declared
// transport that is not chat, else JSON-RPC.
func (d Dialect) stdioTransport() Transport {
	for _, t := range d.TransportList() {
		if t.Kind != TransportChat {
			return t
		}
	}
	return Transport{Kind: TransportJSONRPC}.WithDefaults()
}

func (t Transport) validate(where string) []error {
	var errs []error
	switch t.Kind {
	case "", TransportJSONRPC, TransportFramed, TransportChat:
	default:
		return []error{fmt.Errorf("%s.kind %q: want %s, %s or %s", where, t.Kind, TransportJSONRPC, TransportFramed, TransportChat)}
	}
	if t.Path != "" && !strings.HasPrefix(t.Path, "/") {
		errs = append(errs, fmt.Errorf("%s.path %q: want an absolute path", where, t.Path))
	}
	if t.Kind != TransportFramed && (t.Envelope != Envelope{} || t.Connect != nil) {
		errs = append(errs, fmt.Errorf("%s: envelope and connect belong to a framed transport, not %s", where, t.WithDefaults().Kind))
	}
	if t.Kind != TransportChat && (t.Chat.Model != "" || t.Chat.User != "" || len(t.Chat.Headers) > 0 || t.Chat.LaunchAgent != "") {
		errs = append(errs, fmt.Errorf("%s: chat belongs to a chat transport, not %s", where, t.WithDefaults().Kind))
	}
	if t.Kind == TransportChat && t.Auth == "query" {
		errs = append(errs, fmt.Errorf("%s.auth: a chat takes its token as bearer, none or a header, not query", where))
	}
	switch t.Envelope.IDType {
	case "", "string", "number":
	default:
		errs = append(errs, fmt.Errorf("%s.envelope.id_type %q: want string or number", where, t.Envelope.IDType))
	}
	if c := t.Connect; c != nil {
		if c.Method == "" {
			errs = append(errs, fmt.Errorf("%s.connect: give the method", where))
		}
		if err := placeholder.Connect.Check(c.Params); err != nil {
			errs = append(errs, fmt.Errorf("%s.connect.params: %w", where, err))
		}
	}
	chat := map[string]any{"model": t.Chat.Model, "user": t.Chat.User}
	for k, v := range t.Chat.Headers {
		chat[k] = v
	}
	if err := placeholder.Chat.Check(chat); err != nil {
		errs = append(errs, fmt.Errorf("%s.chat: %w", where, err))
	}
	return errs
}

// validateTransports checks every declared transport. A method mapping of
// an operation a chat does itself (chatBuiltins) is no error: the chat
// ignores it, and a framed or JSON-RPC transport of the same file uses it.
func (d *Dialect) validateTransports() []error {
	var errs []error
	for i, t := range d.Transports {
		errs = append(errs, t.validate(fmt.Sprintf("dialect.transports[%d]", i))...)
	}
	return errs
}
