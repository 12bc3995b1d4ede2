package flood

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

// fakeServer speaks just enough of the tenant-server protocol for a flood:
// gateway.ready, session.create (every third refused with 4290) and
// prompt.submit, counting what it got.
type fakeServer struct {
	*httptest.Server
	token                      string
	creates, submits, refusals atomic.Int64
	busy                       atomic.Int64 // submits while the session's turn ran
	open                       atomic.Int64 // connections open now
	mu                         sync.Mutex
	profiles                   map[string]int
	running                    map[string]bool // sessions with a turn running
	// holdCreates holds every session.create's reply back until
	// releaseCreates, as a server busy with them would.
	holdCreates atomic.Bool
	held        []func()
}

// releaseCreates sends the replies held back, and every later one at once.
func (s *fakeServer) releaseCreates() {
	s.mu.Lock()
	s.holdCreates.Store(false)
	held := s.held
	s.held = nil
	s.mu.Unlock()
	for _, reply := range held {
		reply()
	}
}

func newFakeServer(t *testing.T) *fakeServer {
	t.Helper()
	s := &fakeServer{token: "tok-" + strconv.Itoa(os.Getpid()), profiles: map[string]int{}, running: map[string]bool{}}
	up := websocket.Upgrader{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("token") != s.token {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		s.open.Add(1)
		defer s.open.Add(-1)
		var wmu sync.Mutex
		write := func(v any) {
			b, _ := json.Marshal(v)
			wmu.Lock()
			defer wmu.Unlock()
			_ = ws.WriteMessage(websocket.TextMessage, b)
		}
		write(map[string]any{"jsonrpc": "2.0", "method": "event", "params": map[string]any{"type": "gateway.ready"}})
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				return
			}
			var req struct {
				ID     int64          `json:"id"`
				Method string         `json:"method"`
				Params map[string]any `json:"params"`
			}
			if json.Unmarshal(data, &req) != nil {
				continue
			}
			reply := map[string]any{"jsonrpc": "2.0", "id": req.ID}
			switch req.Method {
			case "session.create":
				n := s.creates.Add(1)
				s.mu.Lock()
				p, _ := req.Params["profile"].(string)
				s.profiles[p]++
				s.mu.Unlock()
				if n%3 == 0 {
					s.refusals.Add(1)
					reply["error"] = map[string]any{"code": 4290, "message": "too many requests in flight"}
				} else {
					reply["result"] = map[string]any{"session_id": fmt.Sprintf("s%d", n)}
				}
				s.mu.Lock()
				if s.holdCreates.Load() {
					s.held = append(s.held, func() { write(reply) })
					s.mu.Unlock()
					continue
				}
				s.mu.Unlock()
			case "prompt.submit":
				// A turn runs 5ms, then ends with message.complete; a
				// submit while it runs is 4090, and every fifth is 4290.
				sid, _ := req.Params["session_id"].(string)
				s.mu.Lock()
				busy := s.running[sid]
				s.running[sid] = !busy
				s.mu.Unlock()
				switch n := s.submits.Add(1); {
				case busy:
					s.busy.Add(1)
					reply["error"] = map[string]any{"code": 4090, "message": "session is busy with a turn"}
				case n%5 == 0:
					s.mu.Lock()
					s.running[sid] = false
					s.mu.Unlock()
					s.refusals.Add(1)
					reply["error"] = map[string]any{"code": 4290, "message": "too many requests in flight"}
				default:
					reply["result"] = map[string]any{"status": "streaming"}
					time.AfterFunc(5*time.Millisecond, func() {
						s.mu.Lock()
						s.running[sid] = false
						s.mu.Unlock()
						write(map[string]any{"jsonrpc": "2.0", "method": "event", "params": map[string]any{"type": "message.complete", "session_id": sid,
							"payload": map[string]any{"status": "complete", "text": "flooded"}}})
					})
				}
			default:
				reply["error"] = map[string]any{"code": -32601, "message": "unknown method"}
			}
			write(reply)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func within(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// gone asserts that pid's process group is empty and pid itself dead.
func gone(t *testing.T, pid int) {
	t.Helper()
	assert.Empty(t, procgroup.GroupMembers(pid), "process group %d", pid)
	assert.False(t, procgroup.Alive(pid), "pid %d", pid)
}

// The flooder re-executes this test binary, floods, counts what the
// server answered, reports its frames, and is reaped by Stop.
func TestFloodCountsStopsAndIsReaped(t *testing.T) {
	t.Parallel()
	srv := newFakeServer(t)
	frames := filepath.Join(t.TempDir(), "frames.jsonl")
	ctx := within(t, time.Minute)
	f, err := Start(ctx, Spec{Base: srv.URL, Token: srv.token, Profile: "beta", Conns: 2, Workers: 5, Prompt: "FLOOD", Frames: frames}, Options{})
	require.NoError(t, err)
	t.Cleanup(f.Kill)
	on, err := f.Wait(ctx, "every worker and a turn", func(c Counts) bool { return c.Workers == 10 && c.Submitted >= 1 })
	require.NoError(t, err)
	assert.Equal(t, 10, on.Workers)

	// The secret crossed on stdin: the child's environment does not hold it.
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", f.Pid()))
	require.NoError(t, err)
	assert.NotContains(t, string(environ), srv.token)
	assert.Contains(t, string(environ), RoleVar+"="+RoleFlooder)
	assert.Contains(t, string(environ), "atexit_sleep_ms=0", "a race-built child does not sleep at its exit")

	c, err := f.Stop(ctx)
	require.NoError(t, err, f.Output())
	assert.True(t, c.Done)
	assert.Equal(t, c.Sent, c.OK+c.Refused+c.Cut, "every request is answered, refused or cut off")
	assert.GreaterOrEqual(t, c.Submitted, int64(1))
	assert.GreaterOrEqual(t, srv.refusals.Load(), int64(1))
	assert.Contains(t, c.FirstErr, "4290")
	assert.Contains(t, c.String(), "turn(s) taken")
	srv.mu.Lock()
	assert.Equal(t, []string{"beta"}, keys(srv.profiles), "every session addresses the flood's profile")
	srv.mu.Unlock()
	data, err := os.ReadFile(frames)
	require.NoError(t, err)
	assert.Contains(t, string(data), "gateway.ready")
	assert.Contains(t, string(data), `"streaming"`)
	assert.GreaterOrEqual(t, bytes.Count(data, []byte("\n")), int(c.OK))
	gone(t, f.Pid())
	again, err := f.Stop(ctx)
	require.NoError(t, err, "a second Stop returns the first one's result")
	assert.Equal(t, c, again)
	f.Kill() // a no-op once stopped
}

// Every worker keeps one turn of its session running, back to back: it
// never submits while its turn runs, tries a refused turn again after the
// backoff, and a refused session ends it; the connections stay open until
// the flood stops.
func TestFloodKeepsATurnRunningPerSession(t *testing.T) {
	t.Parallel()
	srv := newFakeServer(t)
	ctx := within(t, time.Minute)
	f, err := Start(ctx, Spec{Base: srv.URL, Token: srv.token, Conns: 1, Workers: 3, Prompt: "FLOOD", Backoff: 5 * time.Millisecond}, Options{})
	require.NoError(t, err)
	t.Cleanup(f.Kill)
	c, err := f.Wait(ctx, "turns back to back, refusals among them", func(c Counts) bool { return c.Turns >= 12 && srv.refusals.Load() >= 3 })
	require.NoError(t, err)
	assert.Equal(t, int64(3), srv.creates.Load(), "a refused session is not asked for again")
	assert.Equal(t, int64(2), c.Sessions)
	assert.Zero(t, srv.busy.Load(), "no turn is submitted while its session's turn runs")
	assert.Equal(t, int64(1), srv.open.Load(), "the flood's connection is open")
	c, err = f.Stop(ctx)
	require.NoError(t, err)
	assert.True(t, c.Done)
	assert.GreaterOrEqual(t, c.Submitted, c.Turns)
	assert.Equal(t, c.Sent, c.OK+c.Refused+c.Cut)
	deadline := time.Now().Add(30 * time.Second)
	for srv.open.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polling the server's count of open connections
	}
	assert.Equal(t, int64(0), srv.open.Load(), "the flood's connection closed with it")
	gone(t, f.Pid())
}

// A pipeline keeps its session.create requests in flight with no worker
// waiting on them: a server that answers none sees every worker's and
// every pipeline's, and no more; once it answers, each answered request
// is sent again, and each refused one after the backoff.
func TestAPipelineKeepsItsRequestsInFlight(t *testing.T) {
	t.Parallel()
	srv := newFakeServer(t)
	srv.holdCreates.Store(true)
	ctx := within(t, time.Minute)
	const conns, workers, pipeline = 2, 3, 20
	f, err := Start(ctx, Spec{Base: srv.URL, Token: srv.token, Profile: "beta", Conns: conns, Workers: workers, Pipeline: pipeline,
		Prompt: "FLOOD", Backoff: 5 * time.Millisecond}, Options{})
	require.NoError(t, err)
	t.Cleanup(f.Kill)
	const inFlight = conns * (workers + pipeline)
	var over Counts
	_, err = f.Wait(ctx, "every request in flight at the server", func(c Counts) bool {
		if c.Sent > inFlight {
			over = c
		}
		return over.Sent > 0 || (c.Sent == inFlight && srv.creates.Load() == inFlight)
	})
	require.NoError(t, err)
	require.Zero(t, over.Sent, "more requests in flight than the workers and pipelines hold: %s", over)
	assert.Equal(t, int64(inFlight), srv.creates.Load())

	srv.releaseCreates()
	c, err := f.Wait(ctx, "pipelined sessions, sent again", func(c Counts) bool {
		return c.Pipelined >= 2*pipeline && c.Refused >= pipeline && c.Sent > 3*inFlight
	})
	require.NoError(t, err)
	assert.LessOrEqual(t, c.Sessions, int64(conns*workers), "the workers' sessions are counted apart")
	c, err = f.Stop(ctx)
	require.NoError(t, err, f.Output())
	assert.Equal(t, c.Sent, c.OK+c.Refused+c.Cut, "every request is answered, refused or cut off")
	assert.Contains(t, c.String(), "pipelined session(s)")
	srv.mu.Lock()
	assert.Equal(t, []string{"beta"}, keys(srv.profiles), "every session addresses the flood's profile")
	srv.mu.Unlock()
	gone(t, f.Pid())
}

// A held flood opens its connections and sends nothing until Go; stopped
// before Go, it never floods.
func TestAHeldFloodWaitsForGo(t *testing.T) {
	t.Parallel()
	srv := newFakeServer(t)
	ctx := within(t, time.Minute)
	f, c := startHeld(ctx, t, srv, 2)
	assert.Zero(t, c.Workers)
	assert.Equal(t, int64(2), srv.open.Load())
	assert.Zero(t, srv.creates.Load(), "nothing is sent before Go")
	require.NoError(t, f.Go())
	_, err := f.Wait(ctx, "a turn of the flood", func(c Counts) bool { return c.Workers == 4 && c.Turns >= 1 })
	require.NoError(t, err)
	assert.Equal(t, int64(4), srv.creates.Load())
	_, err = f.Stop(ctx)
	require.NoError(t, err)

	never, _ := startHeld(ctx, t, srv, 1)
	c, err = never.Stop(ctx)
	require.NoError(t, err)
	assert.True(t, c.Done)
	assert.Zero(t, c.Sent)
	assert.Equal(t, int64(4), srv.creates.Load(), "the flood stopped before Go sent nothing")
	gone(t, never.Pid())
}

// startHeld starts a held flood of conns connections, two workers each,
// on srv, and waits until its connections are open.
func startHeld(ctx context.Context, t *testing.T, srv *fakeServer, conns int) (*Flood, Counts) {
	t.Helper()
	f, err := Start(ctx, Spec{Base: srv.URL, Token: srv.token, Conns: conns, Workers: 2, Prompt: "FLOOD", Hold: true}, Options{})
	require.NoError(t, err)
	t.Cleanup(f.Kill)
	c, err := f.Wait(ctx, "its connections", func(c Counts) bool { return c.Ready })
	require.NoError(t, err)
	return f, c
}

// A server the flooder cannot reach is an error naming the connection,
// and Kill reaps the child on that path too.
func TestFloodReportsAConnectionItCannotOpen(t *testing.T) {
	t.Parallel()
	srv := newFakeServer(t)
	ctx := within(t, time.Minute)
	f, err := Start(ctx, Spec{Base: srv.URL, Token: "wrong", Conns: 2, Workers: 1, Prompt: "FLOOD"}, Options{})
	require.NoError(t, err)
	_, err = f.Wait(ctx, "every worker", func(c Counts) bool { return c.Workers == 2 })
	require.ErrorContains(t, err, "open flood connection 1 of 2")
	require.ErrorContains(t, err, "401")
	_, err = f.Stop(ctx)
	require.ErrorContains(t, err, "open flood connection")
	gone(t, f.Pid())
}

// Kill mid-flood (the path of a failed scenario) leaves nothing behind,
// and a run's marker is on the child, so a sandbox would see a survivor.
func TestKillReapsAFloodMidway(t *testing.T) {
	t.Parallel()
	srv := newFakeServer(t)
	ctx := within(t, time.Minute)
	marker := "flood-test-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	f, err := Start(ctx, Spec{Base: srv.URL, Token: srv.token, Conns: 1, Workers: 4, Prompt: "FLOOD"}, Options{Marker: marker})
	require.NoError(t, err)
	_, err = f.Wait(ctx, "every worker", func(c Counts) bool { return c.Workers == 4 })
	require.NoError(t, err)
	assert.Equal(t, []int{f.Pid()}, procgroup.Marked(marker))
	f.Kill()
	gone(t, f.Pid())
	assert.Empty(t, procgroup.Marked(marker))
	// Stop after Kill returns at once, with whatever the child reported
	// (its stdin closed an instant before the signal: it may have ended).
	c, _ := f.Stop(ctx)
	assert.GreaterOrEqual(t, c.Sent, int64(4))
}

func TestSpecCheck(t *testing.T) {
	t.Parallel()
	ok := Spec{Base: "http://127.0.0.1:1", Conns: 1, Workers: 1}
	require.NoError(t, ok.Check())
	bad := ok
	bad.Workers = 0
	assert.ErrorContains(t, bad.Check(), "both must be positive")
	bad = ok
	bad.Pipeline = -1
	assert.ErrorContains(t, bad.Check(), "a pipeline of -1 request(s) a connection")

	hooked, err := MarshalDialect(harness.Dialect{Methods: map[string]harness.MethodSpec{"prompt.submit": {Hook: []string{"send-prompt", "{text}"}}}})
	require.NoError(t, err)
	h := ok
	h.Dialect = hooked
	assert.ErrorIs(t, h.Check(), ErrHook)
	_, err = Start(context.Background(), h, Options{})
	assert.ErrorIs(t, err, ErrHook, "a hook is refused before any process starts")

	mapped, err := MarshalDialect(harness.Dialect{Methods: map[string]harness.MethodSpec{"prompt.submit": {Method: "chat.send"}}})
	require.NoError(t, err)
	m := ok
	m.Dialect = mapped
	require.NoError(t, m.Check())
	d, err := m.dialect()
	require.NoError(t, err)
	assert.Equal(t, "chat.send", d.Methods["prompt.submit"].Method, "the dialect crosses to the child intact")
}

// The control answers probes, samples a window, and is reaped by Close.
func TestControlProbesAndIsReaped(t *testing.T) {
	t.Parallel()
	ctx := within(t, time.Minute)
	c, err := StartControl(ctx, ControlOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	d, err := c.Probe()
	require.NoError(t, err)
	assert.Greater(t, d, time.Duration(0))
	// A window that is over at once still gets its min probes.
	over, cancel := context.WithCancel(ctx)
	cancel()
	samples, err := c.Sample(over, time.Millisecond, 3)
	require.NoError(t, err)
	assert.Len(t, samples, 3)
	for _, s := range samples {
		assert.Greater(t, s, time.Duration(0))
	}
	pid := c.Pid()
	require.NoError(t, c.Close())
	gone(t, pid)
	require.NoError(t, c.Close(), "Close twice")
	_, err = c.Probe()
	assert.Error(t, err, "a closed control probes nothing")
}

// A child with no request, or an unknown role, exits with status 2 and
// says why (run in this process: the init hook is the same function).
func TestRunChildRefusesBadRequests(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	assert.Equal(t, 2, runChild("nope", strings.NewReader("{}\n"), &out, &errOut))
	assert.Contains(t, errOut.String(), `unknown role TENANTCANARY_FLOOD_CHILD="nope"`)
	errOut.Reset()
	assert.Equal(t, 2, runChild(RoleFlooder, strings.NewReader(""), &out, &errOut))
	assert.Contains(t, errOut.String(), "read the request on stdin")
	errOut.Reset()
	assert.Equal(t, 1, runChild(RoleFlooder, strings.NewReader(`{"conns":0}`+"\n"), &out, &errOut))
	assert.Contains(t, errOut.String(), "no base URL")
	assert.Empty(t, out.String())
}

func keys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
