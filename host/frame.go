// The frame codec: one Frame per line, encoded and decoded without
// reflection on the hot path (see doc.go for the protocol).

package host

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
)

// ProtocolVersion is the wire protocol's version; the parent refuses a host
// whose hello names another.
const ProtocolVersion = 1

// DefaultMaxFrame is the default limit on one frame's size in bytes.
const DefaultMaxFrame = 4 << 20

// Ref names an object living in one host, fenced by that host's
// generation: a host refuses a Ref of another generation.
type Ref struct {
	Gen uint64 `json:"gen"`
	ID  uint64 `json:"id"`
}

// Frame is one line of the protocol. A request has ID (the sender's id
// space) and Op; its reply has Re (the request's ID) and Body or Err; a
// notification has Op and no ID.
type Frame struct {
	ID uint64 `json:"id,omitempty"`
	Re uint64 `json:"re,omitempty"`
	Op string `json:"op,omitempty"`
	// Parent, on a host's request, is the id of the parent's call it is
	// nested in: the parent runs it as that call's session.
	Parent    uint64          `json:"parent,omitempty"`
	Session   string          `json:"session,omitempty"`
	TimeoutMS int64           `json:"timeout_ms,omitempty"`
	Body      json.RawMessage `json:"body,omitempty"`
	Err       *Error          `json:"err,omitempty"`

	tok *readToken // the reading goroutine serving this request
}

// readFrame reads one line of at most max bytes (newline excluded).
func readFrame(br *bufio.Reader, max int) ([]byte, error) {
	return readFrameCarry(br, max, nil)
}

// readFrameCarry is readFrame keeping, in *carry, what it read of a frame
// before a read deadline cut in, and starting from it next time.
func readFrameCarry(br *bufio.Reader, max int, carry *[]byte) ([]byte, error) {
	var buf []byte
	if carry != nil && len(*carry) > 0 {
		buf, *carry = *carry, nil
	}
	for {
		line, err := br.ReadSlice('\n')
		if len(buf)+len(line) > max+1 {
			return nil, fmt.Errorf("read a frame of more than %d bytes: %w", max, ErrFrameTooLarge)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			buf = append(buf, line...)
			continue
		}
		if err != nil {
			if carry != nil && errors.Is(err, os.ErrDeadlineExceeded) {
				*carry = append(buf, line...)
			}
			return nil, err
		}
		if buf == nil {
			return line, nil
		}
		return append(buf, line...), nil
	}
}

// decodeFrame decodes a frame as appendFrame writes it (no whitespace,
// plain ASCII strings, no err) without reflection. It reports false for
// anything else, which json.Unmarshal then decodes or refuses.
func decodeFrame(line []byte, f *Frame) bool {
	line = bytes.TrimSuffix(line, []byte{'\n'})
	if len(line) < 2 || line[0] != '{' || line[len(line)-1] != '}' {
		return false
	}
	i := 1
	if line[i] == '}' {
		return i == len(line)-1
	}
	for {
		k, next, ok := plainString(line, i)
		if !ok || next >= len(line) || line[next] != ':' {
			return false
		}
		i = next + 1
		switch k {
		case "id", "re", "parent":
			n, next, ok := plainUint(line, i)
			if !ok {
				return false
			}
			switch k {
			case "id":
				f.ID = n
			case "re":
				f.Re = n
			default:
				f.Parent = n
			}
			i = next
		case "timeout_ms":
			neg := i < len(line) && line[i] == '-'
			if neg {
				i++
			}
			n, next, ok := plainUint(line, i)
			if !ok || n > math.MaxInt64 {
				return false
			}
			f.TimeoutMS = int64(n)
			if neg {
				f.TimeoutMS = -f.TimeoutMS
			}
			i = next
		case "op", "session":
			v, next, ok := plainString(line, i)
			if !ok {
				return false
			}
			if k == "op" {
				f.Op = v
			} else {
				f.Session = v
			}
			i = next
		case "body":
			end, ok := skipValue(line, i)
			// Whitespace around the value is no part of it (encoding/json
			// trims it): leave such a frame to encoding/json.
			if !ok || isSpace(line[i]) || isSpace(line[end-1]) || !json.Valid(line[i:end]) {
				return false
			}
			f.Body = append(json.RawMessage(nil), line[i:end]...)
			i = end
		default:
			return false
		}
		if i >= len(line) {
			return false
		}
		switch line[i] {
		case ',':
			i++
		case '}':
			return i == len(line)-1
		default:
			return false
		}
	}
}

// isSpace reports whether c is JSON whitespace.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// plainString reads a JSON string at b[i] made of printable ASCII with no
// escapes.
func plainString(b []byte, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return string(b[i+1 : j]), j + 1, true
		case c < 0x20 || c >= 0x80 || c == '\\':
			return "", 0, false
		}
	}
	return "", 0, false
}

// plainUint reads an unsigned JSON integer at b[i].
func plainUint(b []byte, i int) (uint64, int, bool) {
	j := i
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	if j == i || (b[i] == '0' && j > i+1) || (j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E')) {
		return 0, 0, false
	}
	n, err := strconv.ParseUint(string(b[i:j]), 10, 64)
	return n, j, err == nil
}

// skipValue finds the end of the JSON value starting at b[i] (its syntax is
// checked by the caller).
func skipValue(b []byte, i int) (int, bool) {
	depth := 0
	for j := i; j < len(b); j++ {
		switch b[j] {
		case '"':
			j++
			for j < len(b) && b[j] != '"' {
				if b[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(b) {
				return 0, false
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth < 0 {
				return j, j > i
			}
		case ',':
			if depth == 0 {
				return j, j > i
			}
		}
		if depth == 0 && (b[j] == '"' || b[j] == '}' || b[j] == ']') {
			return j + 1, true
		}
	}
	return 0, false
}

// appendFrame appends f's JSON encoding (what json.Marshal gives, without
// its reflection): f.Body must be valid, compact JSON, as json.Marshal
// writes it.
func appendFrame(b []byte, f *Frame) []byte {
	b = append(b, '{')
	n := len(b)
	key := func(k string) {
		if len(b) > n {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, k...)
		b = append(b, '"', ':')
	}
	number := func(k string, v uint64) { // omitempty
		if v != 0 {
			key(k)
			b = strconv.AppendUint(b, v, 10)
		}
	}
	text := func(k, v string) { // omitempty
		if v != "" {
			key(k)
			b = appendString(b, v)
		}
	}
	number("id", f.ID)
	number("re", f.Re)
	text("op", f.Op)
	number("parent", f.Parent)
	text("session", f.Session)
	if f.TimeoutMS != 0 {
		key("timeout_ms")
		b = strconv.AppendInt(b, f.TimeoutMS, 10)
	}
	if len(f.Body) != 0 {
		key("body")
		b = append(b, f.Body...)
	}
	if f.Err != nil {
		key("err")
		b = append(b, `{"code":`...)
		b = appendString(b, string(f.Err.Code))
		b = append(b, `,"message":`...)
		b = appendString(b, f.Err.Message)
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendString appends s as a JSON string: plain ASCII directly, anything
// else through encoding/json.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// encodeBody is json.Marshal(v), without reflection for the bodies every
// call carries: a result, a tool call with no arguments.
func encodeBody(v any) ([]byte, error) {
	switch b := v.(type) {
	case resultBody:
		return append(appendString([]byte(`{"result":`), b.Result), '}'), nil
	case callBody:
		if b.Args == nil {
			return append(appendString([]byte(`{"tool":`), b.Tool), `,"args":null}`...), nil
		}
	}
	return json.Marshal(v)
}

// decodeBody is json.Unmarshal(raw, v), without reflection for the bodies
// encodeBody writes that way.
func decodeBody(raw []byte, v any) error {
	switch b := v.(type) {
	case *resultBody:
		if s, ok := plainObject(raw, `{"result":`, `}`); ok {
			b.Result = s
			return nil
		}
	case *callBody:
		if s, ok := plainObject(raw, `{"tool":`, `,"args":null}`); ok {
			b.Tool, b.Args = s, nil
			return nil
		}
	}
	return json.Unmarshal(raw, v)
}

// plainObject reads prefix, a plain string (see plainString), suffix: all
// of raw.
func plainObject(raw []byte, prefix, suffix string) (string, bool) {
	if !bytes.HasPrefix(raw, []byte(prefix)) {
		return "", false
	}
	s, next, ok := plainString(raw, len(prefix))
	if !ok || string(raw[next:]) != suffix {
		return "", false
	}
	return s, true
}

func mustJSON(v any) json.RawMessage {
	b, err := encodeBody(v)
	if err != nil {
		panic(fmt.Sprintf("host: encode %T: %v", v, err))
	}
	return b
}

// Operations on the wire.
const (
	opHello    = "hello"    // host -> parent notification, first frame
	opLoad     = "load"     // parent -> host: load plugins
	opLoading  = "loading"  // host -> parent: about to load one plugin
	opCall     = "call"     // parent -> host: run a tool
	opHook     = "hook"     // parent -> host: run one hook
	opProvider = "provider" // parent -> host: call a provider object's method
	opSchema   = "schema"   // parent -> host: run a plugin's config schema
	opExtract  = "extract"  // parent -> one-shot host: model-provider profile data
	opDispatch = "dispatch" // host -> parent: DispatchTool
	opFacade   = "facade"   // host -> parent: State() / LLM() calls
	opCancel   = "cancel"   // either way notification: stop waiting on a request
)

type helloBody struct {
	Protocol int `json:"protocol"`
	PID      int `json:"pid"`
}

type cancelBody struct {
	ID uint64 `json:"id"`
}
