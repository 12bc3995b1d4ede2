package llm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Message is one chat message in the OpenAI wire format.
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Name       string     `json:"name,omitempty"`
}

// ToolCall is an assistant's request to run a tool.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the tool and carries its JSON arguments.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Tool describes a tool offered to the model.
type Tool struct {
	Type     string      `json:"type"`
	Function FunctionDef `json:"function"`
}

// FunctionDef is a tool's name, description and JSON-schema parameters.
type FunctionDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// Request is one chat completion request.
type Request struct {
	Model    string
	Messages []Message
	Tools    []Tool
}

// Usage is the token accounting of a response.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Response is an assembled streamed answer.
type Response struct {
	Message      Message
	FinishReason string
	Usage        *Usage
	Attempts     int // requests made, retries included
}

var (
	// ErrStalled means the stream sent nothing for longer than IdleTimeout.
	ErrStalled = errors.New("provider stream stalled")
	// ErrNoKey means the client has no API key to send.
	ErrNoKey = errors.New("no provider api key")
	// ErrNoBaseURL means the client has no base URL.
	ErrNoBaseURL = errors.New("no provider base url")
)

// APIError is an HTTP error answer from the provider.
type APIError struct {
	Status     int
	Message    string
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	return fmt.Sprintf("provider answered %d: %s", e.Status, e.Message)
}

func (e *APIError) retryable() bool {
	return e.Status == http.StatusTooManyRequests || e.Status == http.StatusRequestTimeout || e.Status >= 500
}

// Client talks to one provider with one key.
type Client struct {
	BaseURL        string        // ends in /v1 (or wherever chat/completions lives)
	APIKey         string        // sent as a bearer token
	MaxRetries     int           // extra attempts after the first
	HTTP           *http.Client  // http.DefaultClient's transport semantics when nil
	RequestTimeout time.Duration // whole-request limit per attempt, 10 minutes when zero
	IdleTimeout    time.Duration // stall limit between stream events, 2 minutes when zero
	// Backoff is the wait before retry n (1-based) when the provider gave no
	// Retry-After; 250ms doubling up to 5s when nil.
	Backoff func(n int) time.Duration
	// ExtraBody holds fields added to every request body (a plugin model
	// provider's BuildExtraBody); they never replace the request's own.
	ExtraBody map[string]any
	// BeforeRetry, when set, runs before each retry is sent; an error ends
	// Stream with it and the retry is not sent (agentd re-checks the
	// credential of the connection whose turn it is).
	BeforeRetry func(ctx context.Context) error
	// Cache, when set, answers a request it holds an answer to (by the
	// request body) without asking the provider, and keeps the provider's
	// complete answers (agentd's cluster mode: a tenant's response cache).
	Cache Cache
}

// Cache keeps providers' answers by request body. Whose answers a Cache
// holds is its own business: agentd gives each tenant its own.
type Cache interface {
	Get(ctx context.Context, body []byte) (Response, bool)
	Put(ctx context.Context, body []byte, resp Response)
}

func (c *Client) backoff(n int, err error) time.Duration {
	var api *APIError
	if errors.As(err, &api) && api.RetryAfter > 0 {
		return min(api.RetryAfter, 30*time.Second)
	}
	if c.Backoff != nil {
		return c.Backoff(n)
	}
	return min(250*time.Millisecond<<(n-1), 5*time.Second)
}

// Stream sends req with stream:true and assembles the answer, calling
// onDelta (if not nil) with each piece of text as it arrives. Failures
// before any text was delivered are retried up to MaxRetries times.
func (c *Client) Stream(ctx context.Context, req Request, onDelta func(string)) (Response, error) {
	if c.BaseURL == "" {
		return Response{}, ErrNoBaseURL
	}
	if c.APIKey == "" {
		return Response{}, ErrNoKey
	}
	body, err := json.Marshal(wireRequest{Model: req.Model, Messages: req.Messages, Tools: req.Tools, Stream: true,
		StreamOptions: &streamOptions{IncludeUsage: true}})
	if err != nil {
		return Response{}, fmt.Errorf("encode chat request: %w", err)
	}
	if len(c.ExtraBody) > 0 {
		if body, err = withExtra(body, c.ExtraBody); err != nil {
			return Response{}, err
		}
	}
	if c.Cache != nil {
		if resp, ok := c.Cache.Get(ctx, body); ok {
			if onDelta != nil && resp.Message.Content != "" {
				onDelta(resp.Message.Content)
			}
			resp.Attempts = 0
			return resp, nil
		}
	}
	var lastErr error
	for attempt := 1; attempt <= c.MaxRetries+1; attempt++ {
		if attempt > 1 {
			t := time.NewTimer(c.backoff(attempt-1, lastErr))
			select {
			case <-ctx.Done():
				t.Stop()
				return Response{Attempts: attempt - 1}, fmt.Errorf("chat completion: %w (after %v)", ctx.Err(), lastErr)
			case <-t.C:
			}
			if c.BeforeRetry != nil {
				if err := c.BeforeRetry(ctx); err != nil {
					return Response{Attempts: attempt - 1}, err
				}
			}
		}
		delivered := false
		resp, err := c.once(ctx, body, func(s string) {
			delivered = true
			if onDelta != nil {
				onDelta(s)
			}
		})
		resp.Attempts = attempt
		if err == nil {
			if c.Cache != nil {
				c.Cache.Put(ctx, body, resp)
			}
			return resp, nil
		}
		lastErr = err
		if ctx.Err() != nil || delivered || !retryable(err) {
			return resp, fmt.Errorf("chat completion (attempt %d of %d): %w", attempt, c.MaxRetries+1, err)
		}
	}
	return Response{Attempts: c.MaxRetries + 1}, fmt.Errorf("chat completion: %d attempts failed: %w", c.MaxRetries+1, lastErr)
}

// withExtra adds the fields of extra that body does not have.
func withExtra(body []byte, extra map[string]any) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("encode chat request: %w", err)
	}
	for k, v := range extra {
		if _, ok := m[k]; ok {
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("encode chat request: extra body field %q: %w", k, err)
		}
		m[k] = b
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode chat request: %w", err)
	}
	return out, nil
}

func retryable(err error) bool {
	var api *APIError
	if errors.As(err, &api) {
		return api.retryable()
	}
	return true // transport errors, drops and stalls
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type wireRequest struct {
	Model         string         `json:"model"`
	Messages      []Message      `json:"messages"`
	Tools         []Tool         `json:"tools,omitempty"`
	Stream        bool           `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
}

type chunk struct {
	Choices []struct {
		Delta struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *Usage `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func (c *Client) once(ctx context.Context, body []byte, onDelta func(string)) (Response, error) {
	reqTimeout := c.RequestTimeout
	if reqTimeout <= 0 {
		reqTimeout = 10 * time.Minute
	}
	idle := c.IdleTimeout
	if idle <= 0 {
		idle = 2 * time.Minute
	}
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	tctx, tcancel := context.WithTimeout(actx, reqTimeout)
	defer tcancel()
	stall := time.AfterFunc(idle, func() { cancel(ErrStalled) })
	defer stall.Stop()

	url := strings.TrimRight(c.BaseURL, "/") + "/chat/completions"
	hreq, err := http.NewRequestWithContext(tctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return Response{}, fmt.Errorf("build request to %s: %w", url, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	hreq.Header.Set("Authorization", "Bearer "+c.APIKey)
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	hresp, err := hc.Do(hreq)
	if err != nil {
		if cause := context.Cause(actx); errors.Is(cause, ErrStalled) {
			return Response{}, fmt.Errorf("post %s: %w", url, cause)
		}
		return Response{}, fmt.Errorf("post %s: %w", url, err)
	}
	defer hresp.Body.Close()
	if hresp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(hresp.Body, 4096))
		api := &APIError{Status: hresp.StatusCode, Message: errorMessage(data)}
		if ms, err := strconv.Atoi(hresp.Header.Get("Retry-After-Ms")); err == nil && ms >= 0 {
			api.RetryAfter = time.Duration(ms) * time.Millisecond
		} else if ra := hresp.Header.Get("Retry-After"); ra != "" {
			if secs, err := strconv.ParseFloat(ra, 64); err == nil && secs >= 0 {
				api.RetryAfter = time.Duration(secs * float64(time.Second))
			}
		}
		return Response{}, api
	}
	var out Response
	out.Message.Role = "assistant"
	var text strings.Builder
	calls := map[int]*ToolCall{}
	order := []int{}
	br := bufio.NewReaderSize(hresp.Body, 64<<10)
	done := false
	for !done {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			stall.Reset(idle)
		}
		if err != nil && (len(line) == 0 || err != io.EOF) {
			if cause := context.Cause(actx); errors.Is(cause, ErrStalled) {
				return out, fmt.Errorf("read stream from %s: %w", url, cause)
			}
			if err == io.EOF {
				return out, fmt.Errorf("read stream from %s: %w before [DONE]", url, io.ErrUnexpectedEOF)
			}
			return out, fmt.Errorf("read stream from %s: %w", url, err)
		}
		line = bytes.TrimRight(line, "\r\n")
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue // blank separators, comments, event: lines
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			break
		}
		var ch chunk
		if err := json.Unmarshal(data, &ch); err != nil {
			return out, fmt.Errorf("decode stream event from %s: %w", url, err)
		}
		if ch.Error != nil {
			return out, &APIError{Status: http.StatusOK, Message: "stream error: " + ch.Error.Message}
		}
		if ch.Usage != nil {
			out.Usage = ch.Usage
		}
		for _, choice := range ch.Choices {
			if d := choice.Delta.Content; d != nil && *d != "" {
				text.WriteString(*d)
				onDelta(*d)
			}
			for _, tc := range choice.Delta.ToolCalls {
				call, ok := calls[tc.Index]
				if !ok {
					call = &ToolCall{Type: "function"}
					calls[tc.Index] = call
					order = append(order, tc.Index)
				}
				if tc.ID != "" {
					call.ID = tc.ID
				}
				if tc.Type != "" {
					call.Type = tc.Type
				}
				call.Function.Name += tc.Function.Name
				call.Function.Arguments += tc.Function.Arguments
			}
			if choice.FinishReason != nil {
				out.FinishReason = *choice.FinishReason
			}
		}
		if err == io.EOF {
			done = true
		}
	}
	out.Message.Content = text.String()
	for _, i := range order {
		call := calls[i]
		if call.ID == "" {
			call.ID = fmt.Sprintf("call_%d", i)
		}
		out.Message.ToolCalls = append(out.Message.ToolCalls, *call)
	}
	return out, nil
}

func errorMessage(data []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	s := strings.TrimSpace(string(data))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
