package fakellm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
)

func TestTwoTenantsHammerTwoServers(t *testing.T) {
	t.Parallel()
	tenants := []string{"alice", "bob"}
	const perClient, clients = 40, 4
	servers := map[string]*fakellm.Server{}
	for _, name := range tenants {
		servers[name] = start(t, fakellm.Options{
			Keys: []string{"sk-" + name},
			Responder: func(r fakellm.Record) fakellm.Response {
				msgs := r.Messages()
				return fakellm.Text("ack " + msgs[len(msgs)-1]["content"].(string)).WithChunkSize(3)
			},
		})
	}
	g, ctx := errgroup.WithContext(testCtx(t))
	for _, name := range tenants {
		for c := range clients {
			client := newClient(servers[name], "sk-"+name)
			g.Go(func() error {
				for i := range perClient {
					marker := fmt.Sprintf("turn-%s-%d-%d", name, c, i)
					var content string
					if i%2 == 0 {
						resp, err := client.Chat.Completions.New(ctx, mainTurn("model-"+name, marker))
						if err != nil {
							return fmt.Errorf("%s: %w", marker, err)
						}
						content = resp.Choices[0].Message.Content
					} else {
						stream := client.Chat.Completions.NewStreaming(ctx, mainTurn("model-"+name, marker))
						var acc openai.ChatCompletionAccumulator
						for stream.Next() {
							acc.AddChunk(stream.Current())
						}
						if err := stream.Err(); err != nil {
							return fmt.Errorf("%s: stream: %w", marker, err)
						}
						_ = stream.Close()
						content = acc.Choices[0].Message.Content
					}
					if content != "ack "+marker {
						return fmt.Errorf("%s: answered %q", marker, content)
					}
				}
				return nil
			})
		}
	}
	require.NoError(t, g.Wait())

	for _, name := range tenants {
		recs := servers[name].Requests()
		require.Len(t, recs, perClient*clients, "%s's server", name)
		seen := map[string]bool{}
		for i, r := range recs {
			assert.Equal(t, i, r.Seq)
			assert.Equal(t, "sk-"+name, r.Auth, "%s's server got a foreign key", name)
			assert.Equal(t, "model-"+name, r.Model())
			marker := r.Messages()[0]["content"].(string)
			assert.True(t, strings.HasPrefix(marker, "turn-"+name+"-"), "%s's server got %q", name, marker)
			assert.False(t, seen[marker], "%q recorded twice", marker)
			seen[marker] = true
			assert.Equal(t, http.StatusOK, r.Status)
		}
	}
}

func TestRequestsReturnsCopies(t *testing.T) {
	t.Parallel()
	s := start(t, fakellm.Options{Script: []fakellm.Response{fakellm.Text("x").WithUsage(1, 2)}})
	_, err := newClient(s, "k").Chat.Completions.New(testCtx(t), mainTurn("model-a", "hello"))
	require.NoError(t, err)

	r := s.Requests()[0]
	r.Headers["authorization"] = "tampered"
	r.Body["model"] = "tampered"
	r.Body["messages"].([]any)[0].(map[string]any)["content"] = "tampered"
	r.RawBody[0] = 'X'
	r.Usage.PromptTokens = 999

	again := s.RequestsOf(fakellm.KindMain)[0]
	assert.Equal(t, "Bearer k", again.Headers["authorization"])
	assert.Equal(t, "model-a", again.Model())
	assert.Equal(t, "hello", again.Messages()[0]["content"])
	assert.Equal(t, byte('{'), again.RawBody[0])
	assert.Equal(t, 1, again.Usage.PromptTokens)
}

// RequestsShared gives what RequestsOf gives, its records' bodies shared
// with the server (the same map every call), and the records' later
// settling seen by a later call.
func TestRequestsSharedIsRequestsOfWithoutCopies(t *testing.T) {
	t.Parallel()
	s := start(t, fakellm.Options{Script: []fakellm.Response{fakellm.Text("x").WithUsage(1, 2), fakellm.Text("y")}})
	for _, q := range []string{"hello", "again"} {
		_, err := newClient(s, "k").Chat.Completions.New(testCtx(t), mainTurn("model-a", q))
		require.NoError(t, err)
	}
	shared, copies := s.RequestsShared(fakellm.KindMain), s.RequestsOf(fakellm.KindMain)
	require.Len(t, shared, 2)
	assert.Equal(t, copies, shared)
	assert.Equal(t, http.StatusOK, shared[1].Status)
	again := s.RequestsShared("")
	assert.Equal(t, reflect.ValueOf(shared[0].Body).Pointer(), reflect.ValueOf(again[0].Body).Pointer(), "a shared body is the server's")
	assert.NotEqual(t, reflect.ValueOf(copies[0].Body).Pointer(), reflect.ValueOf(again[0].Body).Pointer(), "RequestsOf copies")
	assert.Empty(t, s.RequestsShared(fakellm.KindAux))
}

func TestWaitRequests(t *testing.T) {
	t.Parallel()
	s := start(t, fakellm.Options{Script: []fakellm.Response{fakellm.Text("a"), fakellm.Text("b")}})
	c := newClient(s, "k")

	short, cancel := context.WithTimeout(testCtx(t), 20*time.Millisecond)
	defer cancel()
	_, err := s.WaitRequests(short, fakellm.KindMain, 1)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "wait for 1 main request(s)", "a failed wait names what it waited for")

	got := make(chan []fakellm.Record, 1)
	errc := make(chan error, 1)
	go func() {
		recs, err := s.WaitRequests(testCtx(t), fakellm.KindMain, 2)
		got <- recs
		errc <- err
	}()
	ctx := testCtx(t)
	_, err = c.Chat.Completions.New(ctx, auxTurn("m", "aux does not count"))
	require.NoError(t, err)
	for _, m := range []string{"one", "two"} {
		_, err = c.Chat.Completions.New(ctx, mainTurn("m", m))
		require.NoError(t, err)
	}
	require.NoError(t, <-errc)
	recs := <-got
	require.Len(t, recs, 2)
	assert.Equal(t, "one", recs[0].Messages()[0]["content"])

	all, err := s.WaitRequests(ctx, "", 3)
	require.NoError(t, err)
	assert.Len(t, all, 3)
}

func TestOptions(t *testing.T) {
	t.Parallel()
	_, err := fakellm.New(fakellm.Options{Keys: []string{"ok", ""}})
	require.ErrorIs(t, err, fakellm.ErrInvalidOptions)
	assert.Contains(t, err.Error(), "key #1 is empty")

	_, err = fakellm.New(fakellm.Options{AdvertiseURL: "staging:8080/v1"})
	require.ErrorIs(t, err, fakellm.ErrInvalidOptions)
	assert.Contains(t, err.Error(), `"staging:8080/v1"`)

	_, err = fakellm.New(fakellm.Options{Addr: "256.0.0.1:0"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "listen on 256.0.0.1:0")

	s := start(t, fakellm.Options{AdvertiseURL: "http://staging.internal:9000/p/alice/v1/"})
	assert.Equal(t, "http://staging.internal:9000/p/alice/v1", s.BaseURL)
	assert.True(t, strings.HasPrefix(s.URL, "http://127.0.0.1:"), s.URL)

	// The advertised base only changes what is announced: the listener
	// still answers under any prefix, as a path-rewriting proxy would forward.
	direct := start(t, fakellm.Options{Addr: "127.0.0.1:0", AdvertiseURL: "https://llm.example/p/bob/v1"})
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodGet, direct.URL+"/p/bob/v1/models", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "https://llm.example/p/bob/v1", direct.Requests()[0].Server)

	// A bare host is completed with the listener's port and /v1.
	bare := start(t, fakellm.Options{AdvertiseURL: "http://runner.staging"})
	_, port, _ := strings.Cut(strings.TrimPrefix(bare.URL, "http://"), ":")
	assert.Equal(t, "http://runner.staging:"+port+"/v1", bare.BaseURL)
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestJournal(t *testing.T) {
	t.Parallel()
	var alice, shared syncio.Buffer
	a := start(t, fakellm.Options{Journal: &alice, Keys: []string{"sk-a"},
		Script: []fakellm.Response{fakellm.Text("one"), fakellm.ToolCall("terminal", map[string]string{"command": "ls"})}})
	b := start(t, fakellm.Options{Keys: []string{"sk-b"}})
	ctx := testCtx(t)
	_, err := newClient(a, "sk-a").Chat.Completions.New(ctx, mainTurn("m-a", "first"))
	require.NoError(t, err)
	_, err = newClient(b, "sk-b").Chat.Completions.New(ctx, auxTurn("m-b", "bob aux"))
	require.NoError(t, err)

	// Attached late, the journal replays what the server already holds.
	a.Journal(&shared)
	b.Journal(&shared)
	_, err = newClient(a, "sk-x").Chat.Completions.New(ctx, mainTurn("m-x", "foreign"))
	require.Error(t, err)
	_, err = newClient(a, "sk-a").Chat.Completions.New(ctx, mainTurn("m-a", "second"))
	require.NoError(t, err)

	got, err := fakellm.ReadJournal(bytes.NewReader(alice.Bytes()))
	require.NoError(t, err)
	want := a.Requests()
	require.Len(t, got, len(want))
	for i := range want {
		assert.Equal(t, want[i].Seq, got[i].Seq)
		assert.Equal(t, want[i].Auth, got[i].Auth)
		assert.Equal(t, want[i].Status, got[i].Status, "the settled line wins")
		assert.Equal(t, want[i].Response, got[i].Response)
		assert.Equal(t, want[i].RawBody, got[i].RawBody)
		assert.Equal(t, want[i].Body, got[i].Body)
		assert.True(t, want[i].Time.Equal(got[i].Time))
	}
	assert.Equal(t, http.StatusUnauthorized, got[1].Status)
	assert.Equal(t, "sk-x", got[1].Auth)

	both, err := fakellm.ReadJournal(bytes.NewReader(shared.Bytes()))
	require.NoError(t, err)
	require.Len(t, both, 4, "two servers' records stay apart in one journal")
	perServer := map[string]int{}
	for _, r := range both {
		perServer[r.Server]++
	}
	assert.Equal(t, map[string]int{a.BaseURL: 3, b.BaseURL: 1}, perServer)

	_, err = fakellm.ReadJournal(strings.NewReader("{\"seq\":0}\nnot json\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "line 2")

	a.Journal(failingWriter{})
	require.ErrorContains(t, a.JournalErr(), "disk full")
}

func TestStuckCloseSaysWhatIsOpen(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	s := start(t, fakellm.Options{Responder: func(fakellm.Record) fakellm.Response {
		<-release // a responder that never returns on its own
		return fakellm.Text("late")
	}})
	errc := make(chan error, 1)
	go func() {
		_, err := newClient(s, "k").Chat.Completions.New(context.Background(), mainTurn("m", "x"))
		errc <- err
	}()
	_, err := s.WaitRequests(testCtx(t), fakellm.KindMain, 1)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = s.CloseContext(ctx)
	require.ErrorIs(t, err, fakellm.ErrCloseTimeout)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "1 handler(s) still open")

	close(release)
	require.NoError(t, s.CloseContext(testCtx(t)), "once the responder returns, close completes")
	assert.Error(t, <-errc, "the connection was closed under the request")
}

func TestZeroResponseIsNamed(t *testing.T) {
	t.Parallel()
	s := start(t, fakellm.Options{Script: []fakellm.Response{{Text: "no constructor"}}})
	_, err := newClient(s, "k").Chat.Completions.New(testCtx(t), mainTurn("m", "x"))
	apiErr := apiError(t, err, http.StatusInternalServerError)
	assert.Contains(t, apiErr.Message, "has no kind")
}

func TestInvalidStatusIsNamed(t *testing.T) {
	t.Parallel()
	s := start(t, fakellm.Options{Script: []fakellm.Response{fakellm.Error(0, "zero"), fakellm.Raw(42, "text/plain", nil)}})
	c := newClient(s, "k")
	for range 2 {
		_, err := c.Chat.Completions.New(testCtx(t), mainTurn("m", "x"))
		apiErr := apiError(t, err, http.StatusInternalServerError)
		assert.Contains(t, apiErr.Message, "want 200-999")
	}
}

// TestLastSeq: the last arrival's sequence number, none before the first.
func TestLastSeq(t *testing.T) {
	t.Parallel()
	s := start(t, fakellm.Options{})
	_, ok := s.LastSeq()
	require.False(t, ok)
	for i := range 3 {
		resp, err := http.Post(s.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		resp.Body.Close()
		seq, ok := s.LastSeq()
		require.True(t, ok)
		require.Equal(t, i, seq)
		recs := s.Requests()
		require.Equal(t, recs[len(recs)-1].Seq, seq)
	}
}
