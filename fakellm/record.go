package fakellm

import (
	"time"

	"github.com/tenantcanary/tenantcanary/internal/docclone"
)

// Kind classifies a recorded request: KindMain when the body offers tools
// (an agent turn), KindAux otherwise (titles, summaries, probes).
type Kind string

const (
	KindMain Kind = "main"
	KindAux  Kind = "aux"
)

// Usage is the token accounting a response reported.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Record is one request as the provider saw it, captured before the key was
// checked: a request carrying a foreign key is exactly the leak the harness
// hunts, so it must be on the record even though it was refused.
type Record struct {
	Server   string            `json:"server,omitempty"` // the server's advertised base URL (tells journals of many servers apart)
	Seq      int               `json:"seq"`              // 0-based order of arrival on this server
	Time     time.Time         `json:"time"`             // arrival time
	Method   string            `json:"method"`           // HTTP method
	Path     string            `json:"path"`             // URL path as received, e.g. /v1/chat/completions
	API      string            `json:"api"`              // "openai", "anthropic" or "models"
	Kind     Kind              `json:"kind"`             // main when the body has tools, else aux
	Auth     string            `json:"auth"`             // key presented (bearer token or x-api-key), "" if none
	Headers  map[string]string `json:"headers"`          // lower-cased names; repeated values joined by ", "
	RawBody  []byte            `json:"raw_body"`         // body bytes exactly as received
	Body     map[string]any    `json:"body"`             // RawBody decoded as a JSON object; nil if it is not one
	Stream   bool              `json:"stream"`           // the request asked for SSE
	Status   int               `json:"status"`           // HTTP status sent (0 if the connection was dropped first)
	Response string            `json:"response"`         // what was sent: "text", "tool_calls", "error 429", "hang", ...
	Usage    *Usage            `json:"usage,omitempty"`
	Calls    []string          `json:"calls,omitempty"` // ids of the tool calls sent
}

// Model is the body's "model" field, or "" when absent.
func (r Record) Model() string {
	m, _ := r.Body["model"].(string)
	return m
}

// Messages is the body's "messages" array (OpenAI and Anthropic alike),
// each element a decoded JSON object; non-object elements are skipped.
func (r Record) Messages() []map[string]any {
	raw, _ := r.Body["messages"].([]any)
	out := make([]map[string]any, 0, len(raw))
	for _, m := range raw {
		if mm, ok := m.(map[string]any); ok {
			out = append(out, mm)
		}
	}
	return out
}

// EndsWithToolResult reports whether the conversation's last message hands
// back tool results: an OpenAI "tool" message, or an Anthropic "user"
// message whose content holds a tool_result block (Anthropic has no tool
// role). A responder answers it with text to end the tool loop.
func (r Record) EndsWithToolResult() bool {
	msgs := r.Messages()
	if len(msgs) == 0 {
		return false
	}
	last := msgs[len(msgs)-1]
	switch role, _ := last["role"].(string); role {
	case "tool":
		return true
	case "user":
		blocks, _ := last["content"].([]any)
		for _, b := range blocks {
			if bm, ok := b.(map[string]any); ok && bm["type"] == "tool_result" {
				return true
			}
		}
	}
	return false
}

// clone returns a deep copy, so callers can never mutate the server's log.
func (r Record) clone() Record {
	c := r
	if r.Headers != nil {
		c.Headers = make(map[string]string, len(r.Headers))
		for k, v := range r.Headers {
			c.Headers[k] = v
		}
	}
	c.RawBody = append([]byte(nil), r.RawBody...)
	c.Body = docclone.Map(r.Body)
	if r.Usage != nil {
		u := *r.Usage
		c.Usage = &u
	}
	c.Calls = append([]string(nil), r.Calls...)
	return c
}
