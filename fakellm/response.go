package fakellm

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Responder chooses the response to one request. It receives a copy of the
// request's Record (Status, Response and Usage not yet set) and may be called
// from many goroutines at once.
type Responder func(Record) Response

// Call is one tool call of a response. Args is JSON-marshaled, except a
// string, []byte or json.RawMessage, which is sent verbatim (so a test can
// send malformed JSON arguments).
type Call struct {
	Name string
	Args any
	// ID is the call's id on the wire; empty gets a server-unique one
	// (call_... or toolu_...). A responder that must find the call's result
	// again in a later request sets its own.
	ID string
}

// shape is what a Response does on the wire.
type shape int

const (
	shapeNone shape = iota // the zero Response: "use the default"
	shapeText
	shapeTools
	shapeError
	shapeHang
	shapeRaw
)

// Response is one scripted answer. Build it with a constructor (Text,
// ToolCall, ToolCalls, Error, Hang, Raw, DropMidStream, StallMidStream) and
// refine it with the With... methods, which return modified copies.
type Response struct {
	shape shape

	Text      string        // assistant text (text responses)
	Reasoning string        // reasoning_content (OpenAI) / thinking (Anthropic), sent before the text
	Calls     []Call        // tool calls, in index order
	ChunkSize int           // runes of text or argument per stream chunk; 0 means 16
	Delay     time.Duration // pause before each stream chunk after the first (non-streamed: once, before the answer)
	Usage     *Usage        // reported usage; nil means an estimate from the sizes

	Status     int           // HTTP status of an error or raw response
	Message    string        // error message
	RetryAfter time.Duration // error: sent as Retry-After (whole seconds, rounded up) and Retry-After-Ms

	ContentType string // raw response content type
	Body        []byte // raw response body

	// Drop and Stall cut a text or tool-call response short after
	// After stream events (or, without streaming, after half the body):
	// Drop closes the connection, Stall stops writing and holds it open.
	// An After at or past the last event cuts nothing.
	Drop, Stall bool
	After       int

	// For bounds a hang or a stall: when it passes the connection is
	// dropped. Zero means until the client leaves or the server closes.
	For time.Duration
}

// Text answers with assistant text.
func Text(text string) Response { return Response{shape: shapeText, Text: text} }

// ToolCall answers with one tool call. args is JSON-marshaled; a string,
// []byte or json.RawMessage is sent as the raw arguments string.
func ToolCall(name string, args any) Response {
	return ToolCalls(Call{Name: name, Args: args})
}

// ToolCalls answers with parallel tool calls, streamed by index.
func ToolCalls(calls ...Call) Response {
	return Response{shape: shapeTools, Calls: append([]Call(nil), calls...)}
}

// Error answers with an HTTP error in the provider's error shape.
func Error(status int, message string) Response {
	return Response{shape: shapeError, Status: status, Message: message}
}

// Hang accepts the request and never answers; the connection is dropped
// when the client leaves, when For passes, or at Close.
func Hang() Response { return Response{shape: shapeHang} }

// Raw answers with exactly this status, content type and body.
func Raw(status int, contentType string, body []byte) Response {
	return Response{shape: shapeRaw, Status: status, ContentType: contentType, Body: append([]byte(nil), body...)}
}

// DropMidStream sends r (a text or tool-call response) but closes the
// connection after `after` stream events (non-streamed: after half the body).
func DropMidStream(r Response, after int) Response {
	r.Drop, r.Stall, r.After = true, false, after
	return r
}

// StallMidStream sends r (a text or tool-call response) but stops writing
// after `after` stream events (non-streamed: after half the body) and holds
// the connection open until the client leaves, For passes, or Close.
func StallMidStream(r Response, after int) Response {
	r.Stall, r.Drop, r.After = true, false, after
	return r
}

// WithReasoning sets reasoning text sent before the answer.
func (r Response) WithReasoning(text string) Response { r.Reasoning = text; return r }

// WithChunkSize sets how many runes each stream chunk carries.
func (r Response) WithChunkSize(n int) Response { r.ChunkSize = n; return r }

// WithDelay sets the pause before each stream chunk after the first.
func (r Response) WithDelay(d time.Duration) Response { r.Delay = d; return r }

// WithUsage sets the usage the response reports.
func (r Response) WithUsage(prompt, completion int) Response {
	r.Usage = &Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
	return r
}

// WithRetryAfter sets the Retry-After of an error response.
func (r Response) WithRetryAfter(d time.Duration) Response { r.RetryAfter = d; return r }

// WithFor bounds a hang or stall: the connection is dropped after d.
func (r Response) WithFor(d time.Duration) Response { r.For = d; return r }

// IsZero reports whether r is the zero Response (a responder's "no opinion":
// the server then uses its default).
func (r Response) IsZero() bool { return r.shape == shapeNone }

// label is what Record.Response says was sent.
func (r Response) label() string {
	var s string
	switch r.shape {
	case shapeText:
		s = "text"
	case shapeTools:
		s = "tool_calls"
	case shapeError:
		return "error " + strconv.Itoa(r.Status)
	case shapeHang:
		return "hang"
	case shapeRaw:
		return "raw " + strconv.Itoa(r.Status)
	default:
		return "none"
	}
	switch {
	case r.Drop:
		s += " drop@" + strconv.Itoa(r.After)
	case r.Stall:
		s += " stall@" + strconv.Itoa(r.After)
	}
	return s
}

// chunkSize is the effective runes per chunk.
func (r Response) chunkSize() int {
	if r.ChunkSize > 0 {
		return r.ChunkSize
	}
	return 16
}

// argString renders a call's arguments as the wire's arguments string.
func (c Call) argString() (string, error) {
	switch a := c.Args.(type) {
	case nil:
		return "{}", nil
	case string:
		return a, nil
	case []byte:
		return string(a), nil
	case json.RawMessage:
		return string(a), nil
	}
	b, err := json.Marshal(c.Args)
	if err != nil {
		return "", fmt.Errorf("marshal arguments of tool call %q: %w", c.Name, err)
	}
	return string(b), nil
}

// chunks splits s into pieces of at most n runes; "" gives no pieces.
func chunks(s string, n int) []string {
	if s == "" {
		return nil
	}
	out := make([]string, 0, len(s)/n+1)
	count, start := 0, 0
	for i := range s {
		if count == n {
			out = append(out, s[start:i])
			start, count = i, 0
		}
		count++
	}
	return append(out, s[start:])
}
