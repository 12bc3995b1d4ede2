package fakellm_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
)

func TestPlainCompletion(t *testing.T) {
	t.Parallel()
	s := start(t, fakellm.Options{
		Keys:   []string{"sk-alice"},
		Script: []fakellm.Response{fakellm.Text("hello alice").WithReasoning("thinking hard").WithUsage(11, 7)},
	})
	c := newClient(s, "sk-alice")

	got, err := c.Chat.Completions.New(testCtx(t), mainTurn("model-alice", "hi there"))
	require.NoError(t, err)
	require.Len(t, got.Choices, 1)
	assert.Equal(t, "hello alice", got.Choices[0].Message.Content)
	assert.Equal(t, "stop", got.Choices[0].FinishReason)
	assert.Equal(t, "model-alice", got.Model, "the model is echoed")
	assert.Equal(t, `"thinking hard"`, got.Choices[0].Message.JSON.ExtraFields["reasoning_content"].Raw())
	assert.EqualValues(t, 11, got.Usage.PromptTokens)
	assert.EqualValues(t, 18, got.Usage.TotalTokens)

	recs := settled(t, s, 1)
	require.Len(t, recs, 1)
	r := recs[0]
	assert.Equal(t, 0, r.Seq)
	assert.Equal(t, "/v1/chat/completions", r.Path)
	assert.Equal(t, http.MethodPost, r.Method)
	assert.Equal(t, "openai", r.API)
	assert.Equal(t, fakellm.KindMain, r.Kind)
	assert.Equal(t, "sk-alice", r.Auth)
	assert.Equal(t, "Bearer sk-alice", r.Headers["authorization"])
	assert.Equal(t, "application/json", r.Headers["content-type"])
	assert.Equal(t, "model-alice", r.Model())
	require.Len(t, r.Messages(), 1)
	assert.Equal(t, "hi there", r.Messages()[0]["content"])
	assert.Contains(t, string(r.RawBody), `"hi there"`)
	assert.False(t, r.Stream)
	assert.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, "text", r.Response)
	require.NotNil(t, r.Usage)
	assert.Equal(t, 7, r.Usage.CompletionTokens)
	assert.False(t, r.Time.IsZero())
	assert.Equal(t, s.BaseURL, r.Server)
}

func TestAuxNeverConsumesScript(t *testing.T) {
	t.Parallel()
	s := start(t, fakellm.Options{
		Script: []fakellm.Response{fakellm.Text("scripted")},
		AuxResponder: func(r fakellm.Record) fakellm.Response {
			return fakellm.Text("title for " + r.Messages()[0]["content"].(string))
		},
	})
	c := newClient(s, "any-key")
	ctx := testCtx(t)

	aux, err := c.Chat.Completions.New(ctx, auxTurn("m", "summarise"))
	require.NoError(t, err)
	assert.Equal(t, "title for summarise", aux.Choices[0].Message.Content)
	assert.Equal(t, 1, s.ScriptLeft(), "an aux request must leave the script alone")

	main, err := c.Chat.Completions.New(ctx, mainTurn("m", "go"))
	require.NoError(t, err)
	assert.Equal(t, "scripted", main.Choices[0].Message.Content)
	assert.Equal(t, 0, s.ScriptLeft())

	assert.Len(t, s.RequestsOf(fakellm.KindAux), 1)
	assert.Len(t, s.RequestsOf(fakellm.KindMain), 1)
}

func TestDefaultAuxAndUnscriptedMain(t *testing.T) {
	t.Parallel()
	s := start(t, fakellm.Options{})
	c := newClient(s, "k")
	ctx := testCtx(t)

	aux, err := c.Chat.Completions.New(ctx, auxTurn("m", "title please"))
	require.NoError(t, err)
	assert.NotEmpty(t, aux.Choices[0].Message.Content)

	_, err = c.Chat.Completions.New(ctx, mainTurn("m", "unscripted"))
	apiErr := apiError(t, err, http.StatusInternalServerError)
	assert.Contains(t, apiErr.Message, "script empty and no responder", "the error says why")
}

func TestResponderScriptThenFunction(t *testing.T) {
	t.Parallel()
	s := start(t, fakellm.Options{
		Script: []fakellm.Response{fakellm.Text("first")},
		Responder: func(r fakellm.Record) fakellm.Response {
			msgs := r.Messages()
			r.Body["model"] = "mutated" // must not reach the server's log
			return fakellm.Text("echo " + msgs[len(msgs)-1]["content"].(string))
		},
	})
	s.Enqueue(fakellm.Text("second"))
	c := newClient(s, "k")
	ctx := testCtx(t)
	var got []string
	for _, msg := range []string{"a", "b", "c"} {
		resp, err := c.Chat.Completions.New(ctx, mainTurn("m", msg))
		require.NoError(t, err)
		got = append(got, resp.Choices[0].Message.Content)
	}
	assert.Equal(t, []string{"first", "second", "echo c"}, got)
	for _, r := range s.Requests() {
		assert.Equal(t, "m", r.Model(), "a responder's change to its copy leaks into the log")
	}
}

func TestStreamedText(t *testing.T) {
	t.Parallel()
	const text = "the quick brown fox jumps over the lazy dog, ünïcödé too"
	s := start(t, fakellm.Options{Script: []fakellm.Response{
		fakellm.Text(text).WithReasoning("let me think").WithChunkSize(5),
	}})
	c := newClient(s, "k")

	stream := c.Chat.Completions.NewStreaming(testCtx(t), mainTurn("model-x", "stream it"))
	var acc openai.ChatCompletionAccumulator
	var reasoning strings.Builder
	contentChunks := 0
	for stream.Next() {
		chunk := stream.Current()
		require.True(t, acc.AddChunk(chunk), "the accumulator refused chunk %s", chunk.RawJSON())
		if len(chunk.Choices) > 0 {
			if chunk.Choices[0].Delta.Content != "" {
				contentChunks++
			}
			if f, ok := chunk.Choices[0].Delta.JSON.ExtraFields["reasoning_content"]; ok {
				var piece string
				require.NoError(t, unmarshalString(f.Raw(), &piece))
				reasoning.WriteString(piece)
			}
		}
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())

	require.Len(t, acc.Choices, 1)
	assert.Equal(t, text, acc.Choices[0].Message.Content)
	assert.Equal(t, "stop", acc.Choices[0].FinishReason)
	assert.Equal(t, "let me think", reasoning.String())
	assert.Equal(t, len([]rune(text))/5+1, contentChunks, "text is split into 5-rune chunks")
	assert.Positive(t, acc.Usage.TotalTokens, "the final chunk carries usage")

	r := settled(t, s, 1)[0]
	assert.True(t, r.Stream)
	assert.Equal(t, "text", r.Response)
	assert.Equal(t, http.StatusOK, r.Status)
}

func TestStreamedParallelToolCalls(t *testing.T) {
	t.Parallel()
	s := start(t, fakellm.Options{Script: []fakellm.Response{
		fakellm.ToolCalls(
			fakellm.Call{Name: "terminal", Args: map[string]string{"command": "echo SNAPSHOT-BEGIN; env | sort"}},
			fakellm.Call{Name: "read_file", Args: `{"path": "/tmp/x"`}, // malformed on purpose
			fakellm.Call{Name: "noop"},
		).WithChunkSize(4),
		fakellm.ToolCall("terminal", map[string]string{"command": "pwd"}),
	}})
	c := newClient(s, "k")
	ctx := testCtx(t)

	stream := c.Chat.Completions.NewStreaming(ctx, mainTurn("m", "run tools"))
	var acc openai.ChatCompletionAccumulator
	var finished []openai.FinishedChatCompletionToolCall
	for stream.Next() {
		require.True(t, acc.AddChunk(stream.Current()))
		if tc, ok := acc.JustFinishedToolCall(); ok {
			finished = append(finished, tc)
		}
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())

	require.Len(t, acc.Choices, 1)
	calls := acc.Choices[0].Message.ToolCalls
	require.Len(t, calls, 3)
	assert.Equal(t, "tool_calls", acc.Choices[0].FinishReason)
	assert.Equal(t, "terminal", calls[0].Function.Name)
	assert.JSONEq(t, `{"command":"echo SNAPSHOT-BEGIN; env | sort"}`, calls[0].Function.Arguments)
	assert.Equal(t, "read_file", calls[1].Function.Name)
	assert.Equal(t, `{"path": "/tmp/x"`, calls[1].Function.Arguments, "raw arguments pass verbatim")
	assert.Equal(t, "{}", calls[2].Function.Arguments)
	assert.Len(t, finished, 3, "the client saw each call finish")

	// Non-streamed, the next call's id is new: ids are unique per server.
	next, err := c.Chat.Completions.New(ctx, mainTurn("m", "again"))
	require.NoError(t, err)
	ids := map[string]bool{}
	for _, tc := range append(calls, next.Choices[0].Message.ToolCalls...) {
		require.NotEmpty(t, tc.ID)
		assert.False(t, ids[tc.ID], "tool call id %s repeated", tc.ID)
		ids[tc.ID] = true
	}
	assert.Len(t, ids, 4)
	assert.Equal(t, "tool_calls", settled(t, s, 1)[0].Response)
}

func TestToolCallIDsUniqueUnderLoad(t *testing.T) {
	t.Parallel()
	s := start(t, fakellm.Options{Responder: func(fakellm.Record) fakellm.Response {
		return fakellm.ToolCalls(fakellm.Call{Name: "a"}, fakellm.Call{Name: "b"})
	}})
	c := newClient(s, "k")
	ctx := testCtx(t)
	ids := make(chan string, 200)
	errs := make(chan error, 50)
	for range 50 {
		go func() {
			resp, err := c.Chat.Completions.New(ctx, mainTurn("m", "x"))
			if err == nil {
				for _, tc := range resp.Choices[0].Message.ToolCalls {
					ids <- tc.ID
				}
			}
			errs <- err
		}()
	}
	for range 50 {
		require.NoError(t, <-errs)
	}
	close(ids)
	seen := map[string]bool{}
	for id := range ids {
		assert.False(t, seen[id], "id %s handed out twice", id)
		seen[id] = true
	}
	assert.Len(t, seen, 100)
}

func TestRateLimitRetryAfter(t *testing.T) {
	t.Parallel()
	t.Run("seen by the client", func(t *testing.T) {
		t.Parallel()
		s := start(t, fakellm.Options{Script: []fakellm.Response{
			fakellm.Error(http.StatusTooManyRequests, "slow down").WithRetryAfter(1500 * time.Millisecond),
		}})
		_, err := newClient(s, "k").Chat.Completions.New(testCtx(t), mainTurn("m", "x"))
		apiErr := apiError(t, err, http.StatusTooManyRequests)
		assert.Equal(t, "slow down", apiErr.Message)
		assert.Equal(t, "rate_limit_exceeded", apiErr.Code)
		assert.Equal(t, "2", apiErr.Response.Header.Get("Retry-After"), "whole seconds, rounded up")
		assert.Equal(t, "1500", apiErr.Response.Header.Get("Retry-After-Ms"))
		assert.Equal(t, "error 429", settled(t, s, 1)[0].Response)
	})
	t.Run("honoured by the client's retry", func(t *testing.T) {
		t.Parallel()
		s := start(t, fakellm.Options{Script: []fakellm.Response{
			fakellm.Error(http.StatusTooManyRequests, "slow down").WithRetryAfter(10 * time.Millisecond),
			fakellm.Text("made it"),
		}})
		got, err := newClient(s, "k", option.WithMaxRetries(1)).Chat.Completions.New(testCtx(t), mainTurn("m", "x"))
		require.NoError(t, err)
		assert.Equal(t, "made it", got.Choices[0].Message.Content)
		recs := s.Requests()
		require.Len(t, recs, 2, "one refused attempt and one retry")
		assert.Equal(t, []int{429, 200}, []int{recs[0].Status, recs[1].Status})
	})
}

func TestForeignKeyRecordedThen401(t *testing.T) {
	t.Parallel()
	s := start(t, fakellm.Options{
		Keys:   []string{"sk-alice", "sk-alice-rotated"},
		Script: []fakellm.Response{fakellm.Text("for alice only")},
	})
	ctx := testCtx(t)

	_, err := newClient(s, "sk-bob").Chat.Completions.New(ctx, mainTurn("model-bob", "bob's secret turn"))
	apiErr := apiError(t, err, http.StatusUnauthorized)
	assert.Equal(t, "invalid_api_key", apiErr.Code)

	recs := s.Requests()
	require.Len(t, recs, 1, "the refused request is on the record")
	assert.Equal(t, "sk-bob", recs[0].Auth)
	assert.Equal(t, "model-bob", recs[0].Model())
	assert.Contains(t, string(recs[0].RawBody), "bob's secret turn")
	assert.Equal(t, http.StatusUnauthorized, recs[0].Status)
	assert.Equal(t, 1, s.ScriptLeft(), "a refused request consumes nothing")

	got, err := newClient(s, "sk-alice-rotated").Chat.Completions.New(ctx, mainTurn("model-alice", "hi"))
	require.NoError(t, err, "every key of the set is accepted")
	assert.Equal(t, "for alice only", got.Choices[0].Message.Content)
}

func TestHangCutByClientTimeout(t *testing.T) {
	t.Parallel()
	s := start(t, fakellm.Options{Script: []fakellm.Response{fakellm.Hang()}})
	c := newClient(s, "k", option.WithRequestTimeout(100*time.Millisecond))

	_, err := c.Chat.Completions.New(testCtx(t), mainTurn("m", "x"))
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	require.Eventually(t, func() bool {
		recs := s.Requests()
		return len(recs) == 1 && recs[0].Response == "hang"
	}, 10*time.Second, 5*time.Millisecond, "the hang settles once the client gave up")
	assert.Equal(t, 0, s.Requests()[0].Status, "nothing was answered")
}

func TestHangDroppedAtItsDeadline(t *testing.T) {
	t.Parallel()
	s := start(t, fakellm.Options{Script: []fakellm.Response{fakellm.Hang().WithFor(20 * time.Millisecond)}})
	_, err := newClient(s, "k").Chat.Completions.New(testCtx(t), mainTurn("m", "x"))
	require.Error(t, err, "a dropped connection is an error, not an answer")
	var apiErr *openai.Error
	assert.False(t, errors.As(err, &apiErr), "no HTTP response was sent: %v", err)
	assert.NotErrorIs(t, err, context.DeadlineExceeded)
}

func TestDropMidStream(t *testing.T) {
	t.Parallel()
	t.Run("streamed", func(t *testing.T) {
		t.Parallel()
		s := start(t, fakellm.Options{Script: []fakellm.Response{
			fakellm.DropMidStream(fakellm.Text(strings.Repeat("abcd", 20)).WithChunkSize(4), 3),
		}})
		stream := newClient(s, "k").Chat.Completions.NewStreaming(testCtx(t), mainTurn("m", "x"))
		var acc openai.ChatCompletionAccumulator
		n := 0
		for stream.Next() {
			acc.AddChunk(stream.Current())
			n++
		}
		require.Error(t, stream.Err(), "a dropped stream surfaces as an error")
		_ = stream.Close()
		assert.Equal(t, 3, n, "exactly the events before the cut arrived")
		assert.Equal(t, "abcdabcd", acc.Choices[0].Message.Content)
		assert.Equal(t, "text drop@3 (cut)", settled(t, s, 1)[0].Response)
	})
	t.Run("non-streamed", func(t *testing.T) {
		t.Parallel()
		s := start(t, fakellm.Options{Script: []fakellm.Response{
			fakellm.DropMidStream(fakellm.ToolCall("terminal", map[string]string{"command": "ls"}), 0),
		}})
		_, err := newClient(s, "k").Chat.Completions.New(testCtx(t), mainTurn("m", "x"))
		require.Error(t, err, "half a body is an error")
	})
}

func TestStallMidStream(t *testing.T) {
	t.Parallel()
	t.Run("cut by the client", func(t *testing.T) {
		t.Parallel()
		s := start(t, fakellm.Options{Script: []fakellm.Response{
			fakellm.StallMidStream(fakellm.Text("one two three four").WithChunkSize(4), 2),
		}})
		ctx, cancel := context.WithCancel(testCtx(t))
		defer cancel()
		stream := newClient(s, "k").Chat.Completions.NewStreaming(ctx, mainTurn("m", "x"))
		for range 2 {
			require.True(t, stream.Next(), "the events before the stall arrive: %v", stream.Err())
		}
		cancel() // the client gives up on the stalled stream
		assert.False(t, stream.Next())
		require.Error(t, stream.Err())
		_ = stream.Close()
		require.Eventually(t, func() bool {
			return s.Requests()[0].Response == "text stall@2 (cut)"
		}, 10*time.Second, 5*time.Millisecond)
	})
	t.Run("dropped at its deadline", func(t *testing.T) {
		t.Parallel()
		s := start(t, fakellm.Options{Script: []fakellm.Response{
			fakellm.StallMidStream(fakellm.Text("one two three four").WithChunkSize(4), 2).WithFor(20 * time.Millisecond),
		}})
		stream := newClient(s, "k").Chat.Completions.NewStreaming(testCtx(t), mainTurn("m", "x"))
		n := 0
		for stream.Next() {
			n++
		}
		require.Error(t, stream.Err())
		_ = stream.Close()
		assert.Equal(t, 2, n)
	})
}

func TestRawResponse(t *testing.T) {
	t.Parallel()
	s := start(t, fakellm.Options{Script: []fakellm.Response{
		fakellm.Raw(http.StatusOK, "application/json", []byte(`{"choices": "not a list"`)),
		fakellm.Raw(http.StatusBadGateway, "text/html", []byte("<html>bad gateway</html>")),
	}})
	c := newClient(s, "k")
	ctx := testCtx(t)
	_, err := c.Chat.Completions.New(ctx, mainTurn("m", "x"))
	require.Error(t, err, "a malformed body does not parse")
	_, err = c.Chat.Completions.New(ctx, mainTurn("m", "y"))
	apiError(t, err, http.StatusBadGateway)
	assert.Equal(t, []string{"raw 200", "raw 502"}, []string{s.Requests()[0].Response, s.Requests()[1].Response})
}

func TestModelsList(t *testing.T) {
	t.Parallel()
	s := start(t, fakellm.Options{Model: "model-alice-0123456789", Keys: []string{"sk-a"}})
	page, err := newClient(s, "sk-a").Models.List(testCtx(t))
	require.NoError(t, err)
	require.Len(t, page.Data, 1)
	assert.Equal(t, "model-alice-0123456789", page.Data[0].ID)
	r := s.Requests()[0]
	assert.Equal(t, "models", r.API)
	assert.Equal(t, http.MethodGet, r.Method)
	assert.Equal(t, "/v1/models", r.Path)

	_, err = newClient(s, "sk-b").Models.List(testCtx(t))
	apiError(t, err, http.StatusUnauthorized)
}

func TestPerChunkDelayKeepsTheStreamIntact(t *testing.T) {
	t.Parallel()
	s := start(t, fakellm.Options{Script: []fakellm.Response{
		fakellm.Text("slow and steady").WithChunkSize(2).WithDelay(time.Millisecond),
		fakellm.Text("late but whole").WithDelay(time.Millisecond),
	}})
	c := newClient(s, "k")
	stream := c.Chat.Completions.NewStreaming(testCtx(t), mainTurn("m", "x"))
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		require.True(t, acc.AddChunk(stream.Current()))
	}
	require.NoError(t, stream.Err())
	_ = stream.Close()
	assert.Equal(t, "slow and steady", acc.Choices[0].Message.Content)

	got, err := c.Chat.Completions.New(testCtx(t), mainTurn("m", "y"))
	require.NoError(t, err)
	assert.Equal(t, "late but whole", got.Choices[0].Message.Content)
}
