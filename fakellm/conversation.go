package fakellm

import (
	"encoding/json"
	"strings"
)

// LoopBound is how many model requests one user turn may take before a
// provider with Options.TurnBound unset uses it: past it, the turn gets a
// final text answer (LoopedText) and Looped reports the record.
const LoopBound = 8

// LoopedText starts the final answer of a turn that looped past its bound.
const LoopedText = "turn ended by the fake provider: it looped past its bound of model requests"

// Turn is the latest user turn of a request's conversation: everything
// after the last final answer (an assistant message without tool calls).
// A server may wrap the user's prompt in text of its own, split it over
// several user messages, or append user messages after a tool result
// ("runtime facts"): Turn sees through all of them.
type Turn struct {
	// Text joins the text of every user message of the turn (tool results
	// excluded), in order, one per line.
	Text string
	// Calls are the ids of the tool calls the assistant made in the turn.
	Calls []string
	// CallsByID are those calls, by id, as the server sent them back: the
	// tool's name and its arguments (a JSON text).
	CallsByID map[string]CallSeen
	// Results are the tool results of the turn by tool-call id, wherever
	// they are (an OpenAI tool message, an Anthropic tool_result block),
	// not only in the last message.
	Results map[string]string
	// Requests is how many model requests the turn has taken, this one
	// included: one more than its assistant messages.
	Requests int
}

// Turn reads the latest user turn of the request's conversation.
func (r Record) Turn() Turn {
	msgs := r.Messages()
	start := 0
	for i := len(msgs) - 1; i >= 0; i-- {
		if role, _ := msgs[i]["role"].(string); role == "assistant" && len(callIDs(msgs[i])) == 0 {
			start = i + 1
			break
		}
	}
	t := Turn{Results: map[string]string{}, CallsByID: map[string]CallSeen{}, Requests: 1}
	var texts []string
	for _, m := range msgs[start:] {
		switch role, _ := m["role"].(string); role {
		case "user":
			if s := userText(m["content"]); s != "" {
				texts = append(texts, s)
			}
			for id, res := range anthropicResults(m["content"]) {
				t.Results[id] = res
			}
		case "tool":
			id, _ := m["tool_call_id"].(string)
			t.Results[id] = contentText(m["content"])
		case "assistant":
			t.Requests++
			t.Calls = append(t.Calls, callIDs(m)...)
			for id, c := range callsOf(m) {
				t.CallsByID[id] = c
			}
		}
	}
	t.Text = strings.Join(texts, "\n")
	return t
}

// Result is the result of the turn's tool call whose id contains part,
// and whether there is one.
func (t Turn) Result(part string) (string, bool) {
	for id, res := range t.Results {
		if part != "" && strings.Contains(id, part) {
			return res, true
		}
	}
	return "", false
}

// CallSeen is one tool call of an assistant message as a server sent it
// back: the tool's name and its arguments (a JSON text).
type CallSeen struct {
	Name string
	Args string
}

// ResultFor finds the result of the call the provider made with id, even
// where the server rewrote the id (a server that drops its punctuation,
// or suffixes repeats with 2, 3, ...): by the id itself, then by the id
// normalised (NormalID) within the result's normalised id, then by
// content (the
// call whose name and arguments same says are the provider's own: its id,
// whatever the server made of it, leads to the result). It reports how it
// matched ("id", "normalised id", "content"), "" when nothing matched.
func (t Turn) ResultFor(id string, same func(CallSeen) bool) (result, how string) {
	if res, ok := t.Results[id]; ok && id != "" {
		return res, "id"
	}
	if res, ok := t.Result(id); ok {
		return res, "id"
	}
	want := NormalID(id)
	if want != "" {
		for rid, res := range t.Results {
			if strings.Contains(NormalID(rid), want) {
				return res, "normalised id"
			}
		}
	}
	if same != nil {
		for cid, c := range t.CallsByID {
			if res, ok := t.Results[cid]; ok && same(c) {
				return res, "content"
			}
		}
	}
	return "", ""
}

// NormalID is a tool-call id as servers keep it whatever they do to its
// punctuation and case: its letters and digits, lower-cased.
func NormalID(id string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(id) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Answered reports whether one of the turn's own tool calls has its result
// in the turn.
func (t Turn) Answered() bool {
	for _, id := range t.Calls {
		if _, ok := t.Results[id]; ok {
			return true
		}
	}
	return false
}

// Looped reports whether the record's turn had passed bound (LoopBound
// when bound is 0) model requests: the target kept asking after its
// answers.
func (r Record) Looped(bound int) bool {
	if bound <= 0 {
		bound = LoopBound
	}
	return r.Kind == KindMain && r.Turn().Requests > bound
}

// callIDs are the ids of an assistant message's tool calls: OpenAI
// tool_calls, or Anthropic tool_use blocks.
func callIDs(m map[string]any) []string {
	var out []string
	calls, _ := m["tool_calls"].([]any)
	for _, c := range calls {
		if cm, ok := c.(map[string]any); ok {
			id, _ := cm["id"].(string)
			out = append(out, id)
		}
	}
	blocks, _ := m["content"].([]any)
	for _, b := range blocks {
		if bm, ok := b.(map[string]any); ok && bm["type"] == "tool_use" {
			id, _ := bm["id"].(string)
			out = append(out, id)
		}
	}
	return out
}

// callsOf are an assistant message's tool calls by id (OpenAI
// tool_calls, Anthropic tool_use blocks), with their names and arguments.
func callsOf(m map[string]any) map[string]CallSeen {
	out := map[string]CallSeen{}
	calls, _ := m["tool_calls"].([]any)
	for _, c := range calls {
		cm, _ := c.(map[string]any)
		fn, _ := cm["function"].(map[string]any)
		id, _ := cm["id"].(string)
		name, _ := fn["name"].(string)
		args, _ := fn["arguments"].(string)
		out[id] = CallSeen{Name: name, Args: args}
	}
	blocks, _ := m["content"].([]any)
	for _, b := range blocks {
		bm, ok := b.(map[string]any)
		if !ok || bm["type"] != "tool_use" {
			continue
		}
		id, _ := bm["id"].(string)
		name, _ := bm["name"].(string)
		args, _ := json.Marshal(bm["input"])
		out[id] = CallSeen{Name: name, Args: string(args)}
	}
	return out
}

// userText is a user message's own text: a string, or its text parts
// (tool_result blocks excluded).
func userText(content any) string {
	switch c := content.(type) {
	case string:
		return c
	case []any:
		var parts []string
		for _, b := range c {
			bm, ok := b.(map[string]any)
			if !ok || bm["type"] == "tool_result" {
				continue
			}
			if s, ok := bm["text"].(string); ok {
				parts = append(parts, s)
			}
		}
		return strings.Join(parts, "\n")
	}
	return ""
}

// anthropicResults are the tool_result blocks of a user message's content.
func anthropicResults(content any) map[string]string {
	blocks, _ := content.([]any)
	out := map[string]string{}
	for _, b := range blocks {
		if bm, ok := b.(map[string]any); ok && bm["type"] == "tool_result" {
			id, _ := bm["tool_use_id"].(string)
			out[id] = contentText(bm["content"])
		}
	}
	return out
}

// contentText is a content field as text: a string, or its parts' text.
func contentText(content any) string {
	if s, ok := content.(string); ok {
		return s
	}
	return userText(content)
}
