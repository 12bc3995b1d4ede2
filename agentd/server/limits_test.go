package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/agent"
	"github.com/tenantcanary/tenantcanary/agentd/fair"
	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/llm"
	"github.com/tenantcanary/tenantcanary/agentd/rpc"
	"github.com/tenantcanary/tenantcanary/agentd/scope"
	"github.com/tenantcanary/tenantcanary/fakellm"
)

// heldForB answers the launch profile at once and holds profile b's
// model calls until release closes.
func heldForB(release <-chan struct{}) fakellm.Responder {
	return func(r fakellm.Record) fakellm.Response {
		if r.Model() == "model-b" {
			<-release
		}
		return fakellm.Text("done")
	}
}

func errData(m map[string]any) map[string]any {
	e, _ := m["error"].(map[string]any)
	d, _ := e["data"].(map[string]any)
	return d
}

func sessionID(t *testing.T, m map[string]any) string {
	t.Helper()
	res, ok := m["result"].(map[string]any)
	require.True(t, ok, "want a result, got %v", m)
	return res["session_id"].(string)
}

// waitStats polls the turn scheduler until pred holds (events drive the
// scheduler from other goroutines).
func waitStats(t *testing.T, s *fair.Scheduler, what string, pred func(fair.Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !pred(s.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; scheduler: %+v", what, s.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAFloodingProfileHoldsItsShareAndTheNeighbourTurns(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	f := newFixtureWith(t, heldForB(release), func(o *Options) {
		o.Limits = Limits{Turns: 4, ProfileTurns: 2, ConnQueue: 3}
	})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	flood, flood2, neighbour := newConn("flood"), newConn("flood-2"), newConn("neighbour")
	var sids []string
	for range 6 {
		sids = append(sids, sessionID(t, f.call(flood, "session.create", map[string]any{"profile": "b"})))
	}
	for _, sid := range sids[:5] {
		require.Equal(t, 0, code(f.call(flood, "prompt.submit", map[string]any{"session_id": sid, "text": "go"})))
	}
	refused := f.call(flood, "prompt.submit", map[string]any{"session_id": sids[5], "text": "go"})
	require.Equal(t, rpc.CodeTooBusy, code(refused), "past the connection's queue bound: %v", refused)
	require.Contains(t, refused["error"].(map[string]any)["message"], "retry after")
	require.Equal(t, float64(time.Second.Milliseconds()), errData(refused)["retry_after_ms"])
	require.Equal(t, "member", errData(refused)["bound"])
	// A second connection of the same profile buys no second share.
	sid2 := sessionID(t, f.call(flood2, "session.create", map[string]any{"profile": "b"}))
	require.Equal(t, 0, code(f.call(flood2, "prompt.submit", map[string]any{"session_id": sid2, "text": "go"})))
	_, err := f.llm.WaitRequests(context.Background(), fakellm.KindMain, 2)
	require.NoError(t, err)
	waitStats(t, f.srv.turnQ, "b's two turns running and four waiting", func(st fair.Stats) bool {
		return st.Groups["b"] == fair.GroupStats{Running: 2, Waiting: 4, Members: 2}
	})

	// The neighbour's turn runs beside the flood, and completes.
	nsid := sessionID(t, f.call(neighbour, "session.create", map[string]any{}))
	require.Equal(t, 0, code(f.call(neighbour, "prompt.submit", map[string]any{"session_id": nsid, "text": "hi"})))
	done := neighbour.wait(t, "the neighbour's turn", completes(nsid))
	require.Equal(t, "complete", done["params"].(map[string]any)["payload"].(map[string]any)["status"])
	require.Len(t, modelCalls(f.llm, "model-b"), 2, "the flood still holds only its share")

	close(release)
	for _, sid := range sids[:5] {
		flood.wait(t, "a flooding turn", completes(sid))
	}
	flood2.wait(t, "the second connection's turn", completes(sid2))
}

func modelCalls(srv *fakellm.Server, model string) []fakellm.Record {
	var out []fakellm.Record
	for _, r := range srv.RequestsOf(fakellm.KindMain) {
		if r.Model() == model {
			out = append(out, r)
		}
	}
	return out
}

// The positive control: with the no-conn-limit fault nothing is refused
// and every flooding turn runs at once.
func TestNoConnLimitFaultRunsTheWholeFlood(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	f := newFixtureWith(t, heldForB(release), func(o *Options) {
		o.Limits = Limits{Turns: 4, ProfileTurns: 2, ConnQueue: 3}
		o.Faults = faults.Set{faults.NoConnLimit: true}
	})
	flood := newConn("flood")
	var sids []string
	for range 8 {
		sid := sessionID(t, f.call(flood, "session.create", map[string]any{"profile": "b"}))
		require.Equal(t, 0, code(f.call(flood, "prompt.submit", map[string]any{"session_id": sid, "text": "go"})))
		sids = append(sids, sid)
	}
	_, err := f.llm.WaitRequests(context.Background(), fakellm.KindMain, 8)
	require.NoError(t, err, "all eight flooding turns call their provider at once")
	require.Equal(t, Limits{}, f.srv.Limits())
	close(release)
	for _, sid := range sids {
		flood.wait(t, "a flooding turn", completes(sid))
	}
}

func TestRequestsOfAProfileQueueAndOverflowIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixtureWith(t, heldForB(nil), func(o *Options) {
		o.Limits = Limits{Requests: 2, ProfileRequests: 1, ConnRequests: 1, ConnQueue: 2}
	})
	block := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-block:
		default:
			close(block)
		}
	})
	entered := make(chan string, 16)
	f.d.Handle("test.block", func(ctx context.Context, c *rpc.Call) (any, error) {
		entered <- c.Conn.ID()
		<-block
		return map[string]any{"ok": true}, nil
	})
	send := func(c *memConn, id int, method string, params any) {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
		go f.d.Dispatch(context.Background(), c, b)
	}
	reply := func(c *memConn, id int) map[string]any {
		return c.wait(t, fmt.Sprintf("reply #%d on %s", id, c.id), func(m map[string]any) bool { return m["id"] == float64(id) })
	}
	flood, flood2, neighbour := newConn("flood"), newConn("flood-2"), newConn("neighbour")
	send(flood, 1, "test.block", map[string]any{"profile": "b"})
	require.Equal(t, "flood", <-entered)
	send(flood, 2, "test.block", map[string]any{"profile": "b"})
	send(flood, 3, "test.block", map[string]any{"profile": "b"})
	waitStats(t, f.srv.reqs, "two requests queued", func(st fair.Stats) bool { return st.Waiting == 2 })
	send(flood, 4, "test.block", map[string]any{"profile": "b"})
	r := reply(flood, 4)
	require.Equal(t, rpc.CodeTooBusy, code(r), "%v", r)
	require.Contains(t, r["error"].(map[string]any)["message"], "on this connection")
	// Another connection of profile b waits behind b's one slot...
	send(flood2, 5, "test.block", map[string]any{"profile": "b"})
	waitStats(t, f.srv.reqs, "flood-2 queued in b", func(st fair.Stats) bool { return st.Groups["b"].Waiting == 3 })
	// ...while the neighbour's requests are served at once.
	nsid := sessionID(t, f.call(neighbour, "session.create", map[string]any{}))
	require.Equal(t, 0, code(f.call(neighbour, "prompt.submit", map[string]any{"session_id": nsid, "text": "hi"})))
	neighbour.wait(t, "the neighbour's turn", completes(nsid))
	// A made-up profile name buys no group of its own.
	require.Equal(t, unknownGroup, f.srv.requestProfile(&rpc.Call{Conn: flood, Method: "config.set", Params: json.RawMessage(`{"profile":"ghost"}`)}))

	close(block)
	for _, id := range []int{1, 2, 3} {
		require.Equal(t, 0, code(reply(flood, id)))
	}
	require.Equal(t, 0, code(reply(flood2, 5)))
	var order []string
	for range 3 {
		order = append(order, <-entered)
	}
	require.Equal(t, "flood-2", order[0], "inside profile b, flood-2 is served before flood's queued requests: %v", order)
}

// wedgeTool never returns until the test lets it, whatever its context says.
type wedgeTool struct{ until <-chan struct{} }

func (w wedgeTool) Spec() llm.FunctionDef {
	return llm.FunctionDef{Name: "wedge", Description: "never returns"}
}
func (w wedgeTool) Call(context.Context, *agent.Env, json.RawMessage) (string, error) {
	<-w.until
	return "unwedged", nil
}

func TestShutdownIsBoundedWithAWedgedTurn(t *testing.T) {
	t.Parallel()
	unwedge := make(chan struct{})
	f := newFixtureWith(t, func(r fakellm.Record) fakellm.Response {
		return fakellm.ToolCall("wedge", map[string]string{})
	}, func(o *Options) {
		o.StopTimeout = 200 * time.Millisecond
		o.Limits = Limits{Turns: 1, ProfileTurns: 1}
		o.Tools = func(*scope.Scope) *agent.Registry {
			reg := agent.NewRegistry()
			_ = reg.Register(wedgeTool{until: unwedge})
			return reg
		}
	})
	t.Cleanup(func() { close(unwedge) }) // runs before the fixture's own Shutdown
	a := newConn("a")
	sid := sessionID(t, f.call(a, "session.create", map[string]any{}))
	queued := sessionID(t, f.call(a, "session.create", map[string]any{}))
	require.Equal(t, 0, code(f.call(a, "prompt.submit", map[string]any{"session_id": sid, "text": "x"})))
	_, err := f.llm.WaitRequests(context.Background(), fakellm.KindMain, 1)
	require.NoError(t, err)
	require.Equal(t, 0, code(f.call(a, "prompt.submit", map[string]any{"session_id": queued, "text": "y"})))
	waitStats(t, f.srv.turnQ, "the second turn queued", func(st fair.Stats) bool { return st.Waiting == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	returned := make(chan error, 1)
	go func() { returned <- f.srv.Shutdown(ctx) }()
	select {
	case err = <-returned:
	case <-time.After(60 * time.Second):
		t.Fatal("Shutdown did not return with a wedged turn")
	}
	require.ErrorIs(t, err, ErrWedged)
	require.Contains(t, err.Error(), "1 turns did not stop")
	done := a.wait(t, "the queued turn ends", completes(queued))
	payload := done["params"].(map[string]any)["payload"].(map[string]any)
	require.Equal(t, "error", payload["status"])
	require.Contains(t, payload["text"], "shutting down")
}

func TestLimitsValidateAndDefaults(t *testing.T) {
	t.Parallel()
	require.NoError(t, DefaultLimits().Validate())
	require.ErrorContains(t, Limits{ProfileTurns: -1}.Validate(), "profile-turns")
	l := Limits{Turns: 3}.withDefaults()
	require.Equal(t, 3, l.Turns)
	require.Equal(t, DefaultLimits().ProfileTurns, l.ProfileTurns)
	require.LessOrEqual(t, DefaultLimits().ProfileRequests, DefaultLimits().Requests, "one profile never takes every request slot")
	require.Less(t, DefaultLimits().ProfileTurns, DefaultLimits().Turns, "one profile never takes every turn slot")
}

func TestLiveSessionsOfAProfileAreBounded(t *testing.T) {
	t.Parallel()
	f := newFixtureWith(t, heldForB(nil), func(o *Options) { o.Limits = Limits{ProfileSessions: 2} })
	a, other := newConn("a"), newConn("other")
	first := sessionID(t, f.call(a, "session.create", map[string]any{"profile": "b"}))
	sessionID(t, f.call(other, "session.create", map[string]any{"profile": "b"}))
	refused := f.call(a, "session.create", map[string]any{"profile": "b"})
	require.Equal(t, rpc.CodeTooBusy, code(refused), "%v", refused)
	require.Equal(t, "sessions", errData(refused)["bound"])
	require.Contains(t, refused["error"].(map[string]any)["message"], `profile "b" has 2`)
	sessionID(t, f.call(a, "session.create", map[string]any{})) // another profile is not counted
	require.Equal(t, 0, code(f.call(a, "session.close", map[string]any{"session_id": first})))
	sessionID(t, f.call(a, "session.create", map[string]any{"profile": "b"}))
}

// A full profile's session.create is refused before its config is read:
// a flood past the limit costs no parse. A config broken meanwhile shows
// only once a session may open again.
func TestAFullProfileIsRefusedBeforeItsConfigIsRead(t *testing.T) {
	t.Parallel()
	f := newFixtureWith(t, heldForB(nil), func(o *Options) { o.Limits = Limits{ProfileSessions: 1} })
	a := newConn("a")
	first := sessionID(t, f.call(a, "session.create", map[string]any{"profile": "b"}))
	p, err := f.homes.Get("b")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p.File("config.yaml"), []byte("model: [\n"), 0o600))
	refused := f.call(a, "session.create", map[string]any{"profile": "b"})
	require.Equal(t, rpc.CodeTooBusy, code(refused), "%v", refused)
	require.Equal(t, 0, code(f.call(a, "session.close", map[string]any{"session_id": first})))
	broken := f.call(a, "session.create", map[string]any{"profile": "b"})
	require.NotEqual(t, 0, code(broken), "%v", broken)
	require.NotEqual(t, rpc.CodeTooBusy, code(broken), "%v", broken)
}
