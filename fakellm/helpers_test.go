package fakellm_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
)

// start runs a server for the test and closes it when the test ends.
func start(t testing.TB, opts fakellm.Options) *fakellm.Server {
	t.Helper()
	s, err := fakellm.New(opts)
	require.NoError(t, err, "start fakellm")
	t.Cleanup(s.Close)
	return s
}

// newClient is the official OpenAI client pointed at s with key, no retries
// unless opts say otherwise.
func newClient(s *fakellm.Server, key string, opts ...option.RequestOption) *openai.Client {
	base := []option.RequestOption{
		option.WithBaseURL(s.BaseURL + "/"),
		option.WithAPIKey(key),
		option.WithMaxRetries(0),
	}
	c := openai.NewClient(append(base, opts...)...)
	return &c
}

var terminalTool = openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
	Name:       "terminal",
	Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}}},
})

// mainTurn is an agent turn: it offers tools, so the server files it as main.
func mainTurn(model, user string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(user)},
		Tools:    []openai.ChatCompletionToolUnionParam{terminalTool},
	}
}

// auxTurn offers no tools: a title or summary request.
func auxTurn(model, user string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(user)},
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// post sends a raw JSON request (for the Anthropic API, which the OpenAI
// client does not speak).
func post(t testing.TB, url string, header map[string]string, body any) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodPost, url, bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// sseEvent is one server-sent event.
type sseEvent struct {
	Name string
	Data map[string]any
}

// readSSE parses an event stream to its end.
func readSSE(t testing.TB, r io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.Name != "" || cur.Data != nil {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.Name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.Data), "event data %q", line)
		}
	}
	require.NoError(t, sc.Err())
	return out
}

func unmarshalString(raw string, out *string) error { return json.Unmarshal([]byte(raw), out) }

// settled returns copies of s's records once the first n are settled
// (their status and response label set): the server settles a record when
// its handler returns, which may be after the client has read the answer.
func settled(t testing.TB, s *fakellm.Server, n int) []fakellm.Record {
	t.Helper()
	var recs []fakellm.Record
	require.Eventually(t, func() bool {
		recs = s.Requests()
		if len(recs) < n {
			return false
		}
		for _, r := range recs[:n] {
			if r.Status == 0 || r.Response == "" {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond, "the first %d record(s) were never settled", n)
	return recs
}

// apiError is err as the OpenAI client's error, which must carry status.
func apiError(t *testing.T, err error, status int) *openai.Error {
	t.Helper()
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, status, apiErr.StatusCode)
	return apiErr
}
