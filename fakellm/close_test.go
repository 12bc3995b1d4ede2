package fakellm_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
)

// serverGoroutines returns the stacks of goroutines running a fakellm
// server method or net/http's server side.
func serverGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var hits []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, frame := range []string{"fakellm.(*Server)", "net/http.(*conn).serve", "net/http.(*Server).Serve", "net/http.(*connReader).backgroundRead"} {
			if strings.Contains(g, frame) {
				hits = append(hits, g)
				break
			}
		}
	}
	return hits
}

// TestCloseEndsEverythingAndLeaksNothing is not parallel: it counts the
// process's goroutines, and parallel tests only start after it returns.
func TestCloseEndsEverythingAndLeaksNothing(t *testing.T) {
	require.Empty(t, serverGoroutines(), "no server may run before the test starts")
	s, err := fakellm.New(fakellm.Options{Responder: func(r fakellm.Record) fakellm.Response {
		switch r.Messages()[0]["content"] {
		case "hang":
			return fakellm.Hang()
		case "stall":
			return fakellm.StallMidStream(fakellm.Text("never finished"), 1)
		default:
			return fakellm.Text("slow slow slow").WithChunkSize(1).WithDelay(time.Hour)
		}
	}})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	c := newClient(s, "k")
	ctx := context.Background() // no client deadline: only Close can end these

	// One finished request leaves an idle keep-alive connection behind.
	_, err = c.Chat.Completions.New(testCtx(t), auxTurn("m", "warm up"))
	require.NoError(t, err)

	done := make(chan error, 4)
	go func() {
		_, err := c.Chat.Completions.New(ctx, mainTurn("m", "hang"))
		done <- err
	}()
	for _, what := range []string{"stall", "slow"} {
		go func() {
			stream := c.Chat.Completions.NewStreaming(ctx, mainTurn("m", what))
			var acc openai.ChatCompletionAccumulator
			for stream.Next() {
				acc.AddChunk(stream.Current())
			}
			err := stream.Err()
			_ = stream.Close()
			if err == nil {
				err = errors.New(what + " stream ended cleanly: " + acc.Choices[0].Message.Content)
			}
			done <- err
		}()
	}
	waitErr := make(chan error, 1)
	go func() {
		_, err := s.WaitRequests(ctx, fakellm.KindMain, 100)
		waitErr <- err
	}()

	_, err = s.WaitRequests(testCtx(t), fakellm.KindMain, 3)
	require.NoError(t, err)
	// Positive control: the check sees the three handlers that are stuck.
	require.Eventually(t, func() bool {
		n := 0
		for _, g := range serverGoroutines() {
			if strings.Contains(g, "fakellm.(*Server).serve") {
				n++
			}
		}
		return n == 3
	}, 10*time.Second, 5*time.Millisecond, "three handlers in flight")

	closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, s.CloseContext(closeCtx), "close ends every hang and stream")
	s.Close() // safe twice

	for range 3 {
		assert.Error(t, <-done, "a cut request is an error for its client")
	}
	assert.ErrorIs(t, <-waitErr, fakellm.ErrClosed, "a waiter ends at close")
	var left []string
	require.Eventually(t, func() bool {
		left = serverGoroutines()
		return len(left) == 0
	}, 5*time.Second, time.Millisecond, "goroutines left after Close:\n%s", strings.Join(left, "\n\n"))

	for _, r := range s.Requests() {
		assert.NotEmpty(t, r.Response, "request #%d settled", r.Seq)
	}
	_, err = c.Chat.Completions.New(testCtx(t), auxTurn("m", "after close"))
	assert.Error(t, err, "a closed server answers nothing")
}
