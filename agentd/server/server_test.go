package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/rpc"
	"github.com/tenantcanary/tenantcanary/agentd/sandbox/sandboxtest"
	"github.com/tenantcanary/tenantcanary/fakellm"
)

// memConn records frames and wakes waiters.
type memConn struct {
	id string
	frameLog
	done chan struct{}
}

func newConn(id string) *memConn {
	return &memConn{id: id, done: make(chan struct{})}
}

func (c *memConn) ID() string            { return c.id }
func (c *memConn) Done() <-chan struct{} { return c.done }
func (c *memConn) Send(frame []byte) error {
	var m map[string]any
	if err := json.Unmarshal(frame, &m); err != nil {
		return err
	}
	c.add(m)
	return nil
}

func (c *memConn) wait(t *testing.T, what string, pred func(map[string]any) bool) map[string]any {
	t.Helper()
	return c.waitFor(t, 0, what, false, pred)
}

type fixture struct {
	t     *testing.T
	srv   *Server
	d     *rpc.Dispatcher
	homes profile.Homes
	llm   *fakellm.Server
	seq   int
}

func newFixture(t *testing.T, responder fakellm.Responder) *fixture {
	t.Helper()
	return newFixtureWith(t, responder, nil)
}

// newFixtureWith lets a test adjust the server's options.
func newFixtureWith(t *testing.T, responder fakellm.Responder, adjust func(*Options)) *fixture {
	t.Helper()
	root := t.TempDir()
	homes := profile.Homes{Launch: filepath.Join(root, "launch"), Managed: filepath.Join(root, "managed")}
	llm, err := fakellm.New(fakellm.Options{Keys: []string{"key-1"}, Responder: responder})
	require.NoError(t, err)
	t.Cleanup(llm.Close)
	for _, name := range []string{"", "b"} {
		var p profile.Profile
		if name == "" {
			p, err = homes.Get("")
		} else {
			p, err = homes.Create(name)
		}
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p.File("config.yaml"), []byte(fmt.Sprintf(
			"model:\n  base_url: %s\n  default: model-%s\n  key_env: K\nterminal:\n  cwd: %s\n", llm.BaseURL, p.Name, p.Home)), 0o600))
		require.NoError(t, p.SetEnv("K", "key-1"))
	}
	opts := Options{Homes: homes, BaseEnv: []string{"PATH=" + os.Getenv("PATH")}, Self: sandboxtest.Self(t)}
	if adjust != nil {
		adjust(&opts)
	}
	srv := New(opts)
	t.Cleanup(func() { require.NoError(t, srv.Shutdown(context.Background())) })
	d := rpc.NewDispatcher()
	srv.Register(d)
	return &fixture{t: t, srv: srv, d: d, homes: homes, llm: llm}
}

func (f *fixture) call(c *memConn, method string, params any) map[string]any {
	f.t.Helper()
	return f.callOn(c, c, method, params)
}

// callOn dispatches a request from conn and waits for its reply among the
// frames mc (conn's memConn) received.
func (f *fixture) callOn(conn rpc.Conn, mc *memConn, method string, params any) map[string]any {
	f.t.Helper()
	f.seq++
	id := f.seq
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	f.d.Dispatch(context.Background(), conn, b)
	return mc.wait(f.t, method, func(m map[string]any) bool { return m["id"] == float64(id) })
}

func code(m map[string]any) int {
	e, _ := m["error"].(map[string]any)
	if e == nil {
		return 0
	}
	return int(e["code"].(float64))
}

func completes(sid string) func(map[string]any) bool {
	return func(m map[string]any) bool {
		p, _ := m["params"].(map[string]any)
		return m["method"] == "event" && p["session_id"] == sid && p["type"] == "message.complete"
	}
}

func TestOwnershipBusyAndDispatchTool(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	f := newFixture(t, func(r fakellm.Record) fakellm.Response {
		msgs := r.Messages()
		if msgs[len(msgs)-1]["role"] == "tool" {
			return fakellm.Text("done")
		}
		if strings.Contains(string(r.RawBody), "slow") {
			<-release
		}
		return fakellm.ToolCall("terminal", map[string]string{"command": "export MINE=1; echo $HOME"})
	})
	a, b := newConn("a"), newConn("b")
	res := f.call(a, "session.create", map[string]any{"profile": "b"})
	sid := res["result"].(map[string]any)["session_id"].(string)
	require.Equal(t, "model-b", res["result"].(map[string]any)["info"].(map[string]any)["model"])

	require.Equal(t, rpc.CodeForbidden, code(f.call(b, "prompt.submit", map[string]any{"session_id": sid, "text": "x"})))
	require.Equal(t, rpc.CodeUnknownSession, code(f.call(b, "session.close", map[string]any{"session_id": "nope"})))

	require.Equal(t, 0, code(f.call(a, "prompt.submit", map[string]any{"session_id": sid, "text": "slow"})))
	require.Equal(t, rpc.CodeConflict, code(f.call(a, "prompt.submit", map[string]any{"session_id": sid, "text": "again"})), "one turn at a time")
	// A slow turn never blocks another session's requests.
	other := f.call(b, "session.create", map[string]any{})
	require.Equal(t, 0, code(other))
	close(release)
	done := a.wait(t, "turn end", completes(sid))
	require.Equal(t, "complete", done["params"].(map[string]any)["payload"].(map[string]any)["status"])
	b.mu.Lock()
	for _, m := range b.frames {
		p, _ := m["params"].(map[string]any)
		require.NotEqual(t, sid, p["session_id"], "b never gets a's events")
	}
	b.mu.Unlock()

	// A nested call runs as the session: its shell state and profile.
	out, err := f.srv.DispatchTool(context.Background(), sid, "terminal", map[string]any{"command": "echo [$MINE] $HOME"})
	require.NoError(t, err)
	bHome, _ := f.homes.Path("b")
	require.Equal(t, "[1] "+bHome+"\n", out)
	_, err = f.srv.DispatchTool(context.Background(), "s-nope", "terminal", nil)
	require.ErrorIs(t, err, ErrUnknownSession)
	_, err = f.srv.DispatchTool(context.Background(), sid, "no_such_tool", nil)
	require.ErrorIs(t, err, ErrUnknownTool)

	f.srv.DropConn("a")
	require.Equal(t, rpc.CodeUnknownSession, code(f.call(a, "prompt.submit", map[string]any{"session_id": sid, "text": "x"})), "a gone connection's sessions end")
}

func TestShutdownCancelsTurnsAndRefusesWork(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(r fakellm.Record) fakellm.Response { return fakellm.Hang() })
	a := newConn("a")
	sid := f.call(a, "session.create", map[string]any{})["result"].(map[string]any)["session_id"].(string)
	require.Equal(t, 0, code(f.call(a, "prompt.submit", map[string]any{"session_id": sid, "text": "x"})))
	_, err := f.llm.WaitRequests(context.Background(), fakellm.KindMain, 1)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.NoError(t, f.srv.Shutdown(ctx))
	done := a.wait(t, "cancelled turn", completes(sid))
	require.Equal(t, "error", done["params"].(map[string]any)["payload"].(map[string]any)["status"])
	require.Equal(t, rpc.CodeUnavailable, code(f.call(a, "session.create", map[string]any{})))
	_, err = f.srv.RunDetached(context.Background(), Detached{Text: "x"})
	require.ErrorIs(t, err, ErrShuttingDown)
}
