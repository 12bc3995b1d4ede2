package fakellm

import (
	"encoding/json"
	"net/http"
	"strconv"
	"unicode/utf8"
)

// wireCall is a tool call as sent: its server-unique id and raw arguments.
type wireCall struct{ id, name, args string }

// message is one assistant answer about to be rendered.
type message struct {
	id      string
	model   string
	created int64
	r       *Response
	calls   []wireCall
	usage   Usage
}

// ---- OpenAI Chat Completions ----

func openAIJSON(b []byte, m *message) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, m.id)
	b = append(b, `,"object":"chat.completion","created":`...)
	b = strconv.AppendInt(b, m.created, 10)
	b = append(b, `,"model":`...)
	b = appendString(b, m.model)
	b = append(b, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
	if m.r.Text == "" && len(m.calls) > 0 {
		b = append(b, "null"...)
	} else {
		b = appendString(b, m.r.Text)
	}
	if m.r.Reasoning != "" {
		b = append(b, `,"reasoning_content":`...)
		b = appendString(b, m.r.Reasoning)
	}
	if len(m.calls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i, c := range m.calls {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"id":`...)
			b = appendString(b, c.id)
			b = append(b, `,"type":"function","function":{"name":`...)
			b = appendString(b, c.name)
			b = append(b, `,"arguments":`...)
			b = appendString(b, c.args)
			b = append(b, "}}"...)
		}
		b = append(b, ']')
	}
	b = append(b, `},"logprobs":null,"finish_reason":"`...)
	b = append(b, openAIFinish(m)...)
	b = append(b, `"}],"usage":`...)
	b = appendUsage(b, m.usage)
	return append(b, "}\n"...)
}

func openAIFinish(m *message) string {
	if len(m.calls) > 0 {
		return "tool_calls"
	}
	return "stop"
}

// openAIStream renders the SSE events of m into b; ends[i] is the end of
// event i. Tool calls stream as OpenAI streams them: per index, first the id
// and name with empty arguments, then argument fragments.
func openAIStream(b []byte, m *message) ([]byte, []int) {
	n := m.r.chunkSize()
	ends := make([]int, 0, 4+len(m.r.Text)/n+len(m.r.Reasoning)/n+3*len(m.calls))
	head := make([]byte, 0, 128)
	head = append(head, `data: {"id":`...)
	head = appendString(head, m.id)
	head = append(head, `,"object":"chat.completion.chunk","created":`...)
	head = strconv.AppendInt(head, m.created, 10)
	head = append(head, `,"model":`...)
	head = appendString(head, m.model)
	head = append(head, `,"choices":[{"index":0,"delta":`...)
	const tail = `,"finish_reason":null}]}` + "\n\n"

	b = append(b, head...)
	if len(m.calls) > 0 && m.r.Text == "" {
		b = append(b, `{"role":"assistant","content":null}`...)
	} else {
		b = append(b, `{"role":"assistant","content":""}`...)
	}
	b = append(b, tail...)
	ends = append(ends, len(b))
	// The reasoning's chunks, then the text's: one delta field each.
	for _, part := range [...]struct{ field, text string }{{`{"reasoning_content":`, m.r.Reasoning}, {`{"content":`, m.r.Text}} {
		for _, piece := range chunks(part.text, n) {
			b = append(b, head...)
			b = append(b, part.field...)
			b = appendString(b, piece)
			b = append(b, '}')
			b = append(b, tail...)
			ends = append(ends, len(b))
		}
	}
	for i, c := range m.calls {
		b = append(b, head...)
		b = append(b, `{"tool_calls":[{"index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"id":`...)
		b = appendString(b, c.id)
		b = append(b, `,"type":"function","function":{"name":`...)
		b = appendString(b, c.name)
		b = append(b, `,"arguments":""}}]}`...)
		b = append(b, tail...)
		ends = append(ends, len(b))
		for _, piece := range chunks(c.args, n) {
			b = append(b, head...)
			b = append(b, `{"tool_calls":[{"index":`...)
			b = strconv.AppendInt(b, int64(i), 10)
			b = append(b, `,"function":{"arguments":`...)
			b = appendString(b, piece)
			b = append(b, `}}]}`...)
			b = append(b, tail...)
			ends = append(ends, len(b))
		}
	}
	b = append(b, head...)
	b = append(b, `{},"finish_reason":"`...)
	b = append(b, openAIFinish(m)...)
	b = append(b, `"}],"usage":`...)
	b = appendUsage(b, m.usage)
	b = append(b, "}\n\n"...)
	ends = append(ends, len(b))
	b = append(b, "data: [DONE]\n\n"...)
	return b, append(ends, len(b))
}

func appendUsage(b []byte, u Usage) []byte {
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(u.PromptTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(u.CompletionTokens), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(u.TotalTokens), 10)
	return append(b, '}')
}

// ---- Anthropic Messages ----

// toolInput is a call's arguments as an Anthropic input value: the object
// itself when the arguments are valid JSON, else the raw string.
func toolInput(b []byte, args string) []byte {
	if json.Valid([]byte(args)) {
		return append(b, args...)
	}
	return appendString(b, args)
}

func anthropicStop(m *message) string {
	if len(m.calls) > 0 {
		return "tool_use"
	}
	return "end_turn"
}

func anthropicJSON(b []byte, m *message) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, m.id)
	b = append(b, `,"type":"message","role":"assistant","model":`...)
	b = appendString(b, m.model)
	b = append(b, `,"content":[`...)
	sep := false
	if m.r.Reasoning != "" {
		b = append(b, `{"type":"thinking","thinking":`...)
		b = appendString(b, m.r.Reasoning)
		b = append(b, `,"signature":"fakellm"}`...)
		sep = true
	}
	if m.r.Text != "" || len(m.calls) == 0 {
		if sep {
			b = append(b, ',')
		}
		b = append(b, `{"type":"text","text":`...)
		b = appendString(b, m.r.Text)
		b = append(b, '}')
		sep = true
	}
	for _, c := range m.calls {
		if sep {
			b = append(b, ',')
		}
		b = append(b, `{"type":"tool_use","id":`...)
		b = appendString(b, c.id)
		b = append(b, `,"name":`...)
		b = appendString(b, c.name)
		b = append(b, `,"input":`...)
		b = toolInput(b, c.args)
		b = append(b, '}')
		sep = true
	}
	b = append(b, `],"stop_reason":"`...)
	b = append(b, anthropicStop(m)...)
	b = append(b, `","stop_sequence":null,"usage":{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(m.usage.PromptTokens), 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, int64(m.usage.CompletionTokens), 10)
	return append(b, "}}\n"...)
}

// anthropicStream renders the Messages SSE event stream of m.
func anthropicStream(b []byte, m *message) ([]byte, []int) {
	n := m.r.chunkSize()
	var ends []int
	event := func(name string) {
		b = append(b, "event: "...)
		b = append(b, name...)
		b = append(b, "\ndata: "...)
	}
	end := func() {
		b = append(b, "\n\n"...)
		ends = append(ends, len(b))
	}
	index := 0
	blockStop := func() {
		event("content_block_stop")
		b = append(b, `{"type":"content_block_stop","index":`...)
		b = strconv.AppendInt(b, int64(index), 10)
		b = append(b, '}')
		end()
		index++
	}
	blockHead := func(kind string) {
		event(kind)
		b = append(b, `{"type":"`...)
		b = append(b, kind...)
		b = append(b, `","index":`...)
		b = strconv.AppendInt(b, int64(index), 10)
	}

	// deltas streams text as content_block_delta events, each piece
	// after field (the delta's type and its text field's name).
	deltas := func(field, text string) {
		for _, piece := range chunks(text, n) {
			blockHead("content_block_delta")
			b = append(b, field...)
			b = appendString(b, piece)
			b = append(b, "}}"...)
			end()
		}
	}

	event("message_start")
	b = append(b, `{"type":"message_start","message":{"id":`...)
	b = appendString(b, m.id)
	b = append(b, `,"type":"message","role":"assistant","model":`...)
	b = appendString(b, m.model)
	b = append(b, `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(m.usage.PromptTokens), 10)
	b = append(b, `,"output_tokens":1}}}`...)
	end()

	if m.r.Reasoning != "" {
		blockHead("content_block_start")
		b = append(b, `,"content_block":{"type":"thinking","thinking":""}}`...)
		end()
		deltas(`,"delta":{"type":"thinking_delta","thinking":`, m.r.Reasoning)
		blockHead("content_block_delta")
		b = append(b, `,"delta":{"type":"signature_delta","signature":"fakellm"}}`...)
		end()
		blockStop()
	}
	if m.r.Text != "" || len(m.calls) == 0 {
		blockHead("content_block_start")
		b = append(b, `,"content_block":{"type":"text","text":""}}`...)
		end()
		deltas(`,"delta":{"type":"text_delta","text":`, m.r.Text)
		blockStop()
	}
	for _, c := range m.calls {
		blockHead("content_block_start")
		b = append(b, `,"content_block":{"type":"tool_use","id":`...)
		b = appendString(b, c.id)
		b = append(b, `,"name":`...)
		b = appendString(b, c.name)
		b = append(b, `,"input":{}}}`...)
		end()
		deltas(`,"delta":{"type":"input_json_delta","partial_json":`, c.args)
		blockStop()
	}
	event("message_delta")
	b = append(b, `{"type":"message_delta","delta":{"stop_reason":"`...)
	b = append(b, anthropicStop(m)...)
	b = append(b, `","stop_sequence":null},"usage":{"output_tokens":`...)
	b = strconv.AppendInt(b, int64(m.usage.CompletionTokens), 10)
	b = append(b, "}}"...)
	end()
	event("message_stop")
	b = append(b, `{"type":"message_stop"}`...)
	end()
	return b, ends
}

// ---- errors and models ----

// errorBody renders an error in the shape of the API the request spoke.
func errorBody(b []byte, api string, status int, msg string) []byte {
	if api == apiAnthropic {
		b = append(b, `{"type":"error","error":{"type":"`...)
		b = append(b, anthropicErrorType(status)...)
		b = append(b, `","message":`...)
		b = appendString(b, msg)
		return append(b, "}}\n"...)
	}
	typ, code := openAIErrorType(status)
	b = append(b, `{"error":{"message":`...)
	b = appendString(b, msg)
	b = append(b, `,"type":"`...)
	b = append(b, typ...)
	b = append(b, `","param":null,"code":`...)
	if code == "" {
		b = append(b, "null"...)
	} else {
		b = appendString(b, code)
	}
	return append(b, "}}\n"...)
}

func openAIErrorType(status int) (typ, code string) {
	switch status {
	case http.StatusUnauthorized:
		return "invalid_request_error", "invalid_api_key"
	case http.StatusTooManyRequests:
		return "rate_limit_error", "rate_limit_exceeded"
	case http.StatusNotFound:
		return "invalid_request_error", "not_found"
	}
	if status >= 500 {
		return "server_error", ""
	}
	return "invalid_request_error", ""
}

func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

func (s *Server) modelsBody() []byte {
	b := append([]byte(nil), `{"object":"list","data":[{"id":`...)
	b = appendString(b, s.model)
	return append(b, `,"object":"model","created":0,"owned_by":"fakellm"}]}`+"\n"...)
}

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD.
func appendString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
