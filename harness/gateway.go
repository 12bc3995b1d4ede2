package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// GatewayReply is one answer of the HTTP gateway.
type GatewayReply struct {
	Status int    // HTTP status
	Text   string // the assistant's text (streamed deltas joined)
	Body   []byte // the raw body, for the text scan
}

// GatewayClient talks to an OpenAI-compatible gateway.
type GatewayClient struct {
	Base string       // http://host:port
	HTTP *http.Client // default http.DefaultClient
}

// RoutePath is the chat path of a profile on agentd's gateway: the launch
// profile's at the root, every other one under /p/<name>.
//
// Deprecated: agentd's layout only; a target declares its own in
// llm_gateway.access (AccessTemplate.For gives a tenant's).
func RoutePath(profile string, launch bool) string {
	if launch {
		return "/v1/chat/completions"
	}
	return "/p/" + profile + "/v1/chat/completions"
}

// Chat posts one user message on path with key as bearer token. A refused
// key is not an error: the reply carries its status.
func (g *GatewayClient) Chat(ctx context.Context, path, key, text string, stream bool) (GatewayReply, error) {
	return g.Complete(ctx, ChatRequest{Path: path, Key: key, Model: "gateway", Text: text, Stream: stream})
}

// ChatRequest is one chat completion a tenant asks a gateway for.
type ChatRequest struct {
	Path   string // the chat completions path
	Key    string // the bearer key; "" sends none
	Model  string // the model named; "" names none
	Text   string // the user message
	Stream bool
	// Tools adds a function tool to the request, so a gateway that passes
	// it on makes a main request of it upstream (fakellm.KindMain: the
	// provider then checks its model and serves its script).
	Tools bool
}

// probeTool is the function tool a ChatRequest with Tools offers.
var probeTool = []map[string]any{{"type": "function", "function": map[string]any{
	"name": "noop", "description": "does nothing", "parameters": map[string]any{"type": "object", "properties": map[string]any{}},
}}}

// Complete posts r. A refusal is not an error: the reply carries its
// status and body.
func (g *GatewayClient) Complete(ctx context.Context, r ChatRequest) (GatewayReply, error) {
	msg := map[string]any{
		"stream":   r.Stream,
		"messages": []map[string]string{{"role": "user", "content": r.Text}},
	}
	if r.Model != "" {
		msg["model"] = r.Model
	}
	if r.Tools {
		msg["tools"] = probeTool
	}
	body, _ := json.Marshal(msg)
	path := r.Path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(g.Base, "/")+path, bytes.NewReader(body))
	if err != nil {
		return GatewayReply{}, fmt.Errorf("gateway %s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if r.Key != "" {
		req.Header.Set("Authorization", "Bearer "+r.Key)
	}
	stream := r.Stream
	client := g.HTTP
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return GatewayReply{}, fmt.Errorf("gateway %s: %w", path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	reply := GatewayReply{Status: resp.StatusCode, Body: raw}
	if err != nil {
		if stream && resp.StatusCode == http.StatusOK {
			reply.Text, _ = sseText(raw) // the deltas of the whole chunks that came
		}
		return reply, fmt.Errorf("gateway %s: read body: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return reply, nil
	}
	if stream {
		reply.Text, err = sseText(raw)
	} else {
		reply.Text, err = completionText(raw)
	}
	if err != nil {
		return reply, fmt.Errorf("gateway %s: %w", path, err)
	}
	return reply, nil
}

func completionText(raw []byte) (string, error) {
	var c struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(raw, &c); err != nil || len(c.Choices) == 0 {
		return "", fmt.Errorf("not a chat completion: %s", truncate(string(raw), 200))
	}
	return c.Choices[0].Message.Content, nil
}

func sseText(raw []byte) (string, error) {
	var b strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	done := false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return b.String(), fmt.Errorf("bad SSE chunk %s: %w", truncate(data, 200), err)
		}
		for _, ch := range chunk.Choices {
			b.WriteString(ch.Delta.Content)
		}
	}
	if !done {
		return b.String(), fmt.Errorf("SSE stream ended without [DONE]")
	}
	return b.String(), nil
}
