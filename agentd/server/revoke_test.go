package server

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/agent"
	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/llm"
	"github.com/tenantcanary/tenantcanary/agentd/rpc"
	"github.com/tenantcanary/tenantcanary/agentd/scope"
	"github.com/tenantcanary/tenantcanary/agentd/wsserve"
	"github.com/tenantcanary/tenantcanary/fakellm"
)

// markTool counts its calls: the test's witness that a tool ran.
type markTool struct{ calls *atomic.Int64 }

func (m markTool) Spec() llm.FunctionDef {
	return llm.FunctionDef{Name: "mark", Description: "count a call", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (m markTool) Call(context.Context, *agent.Env, json.RawMessage) (string, error) {
	m.calls.Add(1)
	return "marked", nil
}

// wsWorld is the real server behind a real websocket handler, profile b
// holding the tenant key "key-of-b", its provider holding a turn whose
// prompt is "hold" until the test releases it.
type wsWorld struct {
	*fixture
	url     string
	tools   *atomic.Int64
	release func()
	held    chan struct{} // a "hold" request arrived
}

func newWSWorld(t *testing.T, fs faults.Set) *wsWorld {
	t.Helper()
	w := &wsWorld{tools: &atomic.Int64{}, held: make(chan struct{}, 4)}
	gate := make(chan struct{})
	w.release = sync.OnceFunc(func() { close(gate) })
	w.fixture = newFixtureWith(t, func(r fakellm.Record) fakellm.Response {
		if r.EndsWithToolResult() {
			return fakellm.Text("after the tool")
		}
		if strings.Contains(string(r.RawBody), "hold") {
			w.held <- struct{}{}
			<-gate
			return fakellm.ToolCall("mark", map[string]any{})
		}
		return fakellm.Text("done")
	}, func(o *Options) {
		o.Faults = fs
		o.Tools = func(*scope.Scope) *agent.Registry {
			reg := agent.NewRegistry()
			require.NoError(t, reg.Register(markTool{w.tools}))
			return reg
		}
	})
	t.Cleanup(w.release) // before the provider's Close, which waits for its responders
	bp, err := w.homes.Get("b")
	require.NoError(t, err)
	require.NoError(t, bp.SetEnv(TenantKeyEnv, "key-of-b"))
	h := wsserve.New(wsserve.Options{Token: "op-token", Dispatcher: w.d, OnOpen: w.srv.Ready, OnClose: w.srv.DropConn, Tenant: w.srv.TenantOf})
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		_ = h.Close()
		hs.Close()
	})
	w.url = "ws" + strings.TrimPrefix(hs.URL, "http") + "/api/ws?token="
	return w
}

// wsClient is one real websocket connection and the frames it read.
type wsClient struct {
	t  *testing.T
	ws *websocket.Conn
	frameLog
	seq int
}

func (w *wsWorld) dial(token string) *wsClient {
	t := w.t
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(w.url+token, nil)
	require.NoError(t, err)
	c := &wsClient{t: t, ws: ws}
	done := make(chan struct{})
	go func() { // ends when the socket closes
		defer close(done)
		for {
			_, msg, err := ws.ReadMessage()
			if err != nil {
				return
			}
			var m map[string]any
			if json.Unmarshal(msg, &m) == nil {
				c.add(m)
			}
		}
	}()
	t.Cleanup(func() {
		ws.Close()
		<-done
	})
	c.wait("gateway.ready", isEvent("gateway.ready", ""))
	return c
}

func isEvent(typ, sid string) func(map[string]any) bool {
	return func(m map[string]any) bool {
		p, _ := m["params"].(map[string]any)
		return m["method"] == "event" && p["type"] == typ && (sid == "" || p["session_id"] == sid)
	}
}

func (c *wsClient) wait(what string, pred func(map[string]any) bool) map[string]any {
	c.t.Helper()
	return c.waitFor(c.t, 0, what, true, pred)
}

// waitCount waits for n frames that match pred.
func (c *wsClient) waitCount(what string, pred func(map[string]any) bool, n int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.waitN(ctx, 0, n, pred); err != nil {
		c.t.Fatalf("timed out waiting for %s (%v)", what, err)
	}
}

func (c *wsClient) has(pred func(map[string]any) bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.frames {
		if pred(m) {
			return true
		}
	}
	return false
}

func (c *wsClient) call(method string, params any) map[string]any {
	c.t.Helper()
	c.seq++
	id := c.seq
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	require.NoError(c.t, c.ws.WriteMessage(websocket.TextMessage, b))
	return c.wait(method+" reply", func(m map[string]any) bool { return m["id"] == float64(id) })
}

func (c *wsClient) create() string {
	c.t.Helper()
	res := c.call("session.create", map[string]any{})
	require.Equal(c.t, 0, code(res), "%v", res)
	return res["result"].(map[string]any)["session_id"].(string)
}

func payloadOf(m map[string]any) map[string]any {
	return m["params"].(map[string]any)["payload"].(map[string]any)
}

// revocations are the three ways a tenant credential stops opening its
// profile; each returns the key that opens it afterwards ("" for none).
var revocations = []struct {
	name   string
	revoke func(t *testing.T, w *wsWorld, op *wsClient)
}{
	{"rotated", func(t *testing.T, w *wsWorld, _ *wsClient) {
		bp, err := w.homes.Get("b")
		require.NoError(t, err)
		require.NoError(t, bp.SetEnv(TenantKeyEnv, "rotated-key-of-b"))
	}},
	{"disabled", func(t *testing.T, w *wsWorld, _ *wsClient) {
		bp, err := w.homes.Get("b")
		require.NoError(t, err)
		// The operator edits .env in place (same inode): the key line goes.
		require.NoError(t, os.WriteFile(bp.File(".env"), []byte("K=key-1\n"), 0o600))
	}},
	{"deleted", func(t *testing.T, w *wsWorld, op *wsClient) {
		require.Equal(t, 0, code(op.call("profiles.delete", map[string]any{"name": "b"})))
	}},
}

// filesOf reads profile b's config.yaml and .env ("" when missing).
func (w *wsWorld) filesOf() [2]string {
	var out [2]string
	p, err := w.homes.Path("b")
	require.NoError(w.t, err)
	for i, name := range []string{"config.yaml", ".env"} {
		b, _ := os.ReadFile(p + "/" + name)
		out[i] = string(b)
	}
	return out
}

// After its credential is revoked, a tenant connection's session-addressed
// calls are refused (4030) and do nothing; with stale-credential they are
// served (the positive control).
func TestRevokedCredentialRefusesSessionCalls(t *testing.T) {
	t.Parallel()
	for _, rv := range revocations {
		for _, seeded := range []bool{false, true} {
			if seeded && rv.name == "deleted" {
				continue // the delete ends the profile's sessions itself (4044 then), fault or not
			}
			name := rv.name
			var fs faults.Set
			if seeded {
				name, fs = rv.name+"/"+string(faults.StaleCredential), faults.Set{faults.StaleCredential: true}
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				w := newWSWorld(t, fs)
				op, c := w.dial("op-token"), w.dial("key-of-b")
				sid := c.create()
				require.Equal(t, 0, code(c.call("prompt.submit", map[string]any{"session_id": sid, "text": "hello"})))
				done := c.wait("the control turn", isEvent("message.complete", sid))
				require.Equal(t, "complete", payloadOf(done)["status"], "control: the tenant's turn runs")
				requests := len(w.llm.Requests())

				rv.revoke(t, w, op)
				files := w.filesOf()
				calls := []struct {
					method string
					params map[string]any
				}{
					{"prompt.submit", map[string]any{"session_id": sid, "text": "after revocation"}},
					{"config.set", map[string]any{"session_id": sid, "key": "prompt", "value": "set-after-revocation"}},
					{"model.save_key", map[string]any{"session_id": sid, "slug": "late", "api_key": "saved-after-revocation"}},
					{"session.close", map[string]any{"session_id": sid}},
				}
				if seeded {
					for _, cl := range calls {
						require.Equal(t, 0, code(c.call(cl.method, cl.params)), "the stale credential is served: %s", cl.method)
						if cl.method == "prompt.submit" {
							c.waitCount("the stale turn's end", isEvent("message.complete", sid), 2)
						}
					}
					require.Greater(t, len(w.llm.Requests()), requests, "the stale credential drove the provider")
					require.NotEqual(t, files, w.filesOf(), "the stale credential wrote the profile's files")
					return
				}
				for _, cl := range calls {
					res := c.call(cl.method, cl.params)
					require.Equal(t, rpc.CodeForbidden, code(res), "%s after the credential was revoked: %v", cl.method, res)
				}
				ev := c.wait("the revocation's error event", isEvent("error", ""))
				require.Contains(t, payloadOf(ev)["message"], "credential revoked")
				// Even the profile-addressed calls, and a fresh session.
				require.Equal(t, rpc.CodeForbidden, code(c.call("session.create", map[string]any{})))
				require.Equal(t, requests, len(w.llm.Requests()), "no model request after the revocation")
				require.Equal(t, files, w.filesOf(), "no file of the profile changed")
				require.Equal(t, int64(0), w.tools.Load())
				// The operator is untouched, and its turn is the
				// barrier: a stray request would have been sent by now.
				osid := op.create()
				require.Equal(t, 0, code(op.call("prompt.submit", map[string]any{"session_id": osid, "text": "operator"})))
				require.Equal(t, "complete", payloadOf(op.wait("operator turn", isEvent("message.complete", osid)))["status"])
				require.Equal(t, requests+1, len(w.llm.Requests()), "only the operator's request reached the provider")
			})
		}
	}
}

// A turn whose connection's credential is revoked while its model request
// is in flight runs no tool and makes no further model request, and ends
// with status error saying why; with stale-credential it runs on.
func TestRevokedCredentialStopsTheTurnInFlight(t *testing.T) {
	t.Parallel()
	for _, rv := range revocations {
		for _, seeded := range []bool{false, true} {
			if seeded && rv.name == "deleted" {
				continue // the delete cancels the profile's turns itself, fault or not
			}
			name := rv.name
			var fs faults.Set
			if seeded {
				name, fs = rv.name+"/"+string(faults.StaleCredential), faults.Set{faults.StaleCredential: true}
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				w := newWSWorld(t, fs)
				op, c := w.dial("op-token"), w.dial("key-of-b")
				sid := c.create()
				require.Equal(t, 0, code(c.call("prompt.submit", map[string]any{"session_id": sid, "text": "hold"})))
				select {
				case <-w.held:
				case <-time.After(30 * time.Second):
					t.Fatal("the turn's model request never arrived")
				}
				requests := len(w.llm.Requests())
				rv.revoke(t, w, op)
				w.release() // the provider answers: call the tool "mark"
				done := payloadOf(c.wait("the turn's end", isEvent("message.complete", sid)))
				if seeded {
					require.Equal(t, "complete", done["status"], "%v", done)
					require.Equal(t, int64(1), w.tools.Load(), "the stale turn ran its tool")
					require.Equal(t, requests+1, len(w.llm.Requests()), "the stale turn made its next model request")
					return
				}
				require.Equal(t, "error", done["status"])
				if rv.name != "deleted" { // a delete cancels the turn before it sees the reply
					require.Contains(t, done["text"], "credential revoked")
					c.wait("the revocation's error event", isEvent("error", ""))
				}
				require.Equal(t, int64(0), w.tools.Load(), "no tool ran after the revocation")
				require.False(t, c.has(isEvent("tool.start", sid)), "no tool started")
				require.Equal(t, rpc.CodeForbidden, code(c.call("prompt.submit", map[string]any{"session_id": sid, "text": "again"})))
				osid := op.create()
				require.Equal(t, 0, code(op.call("prompt.submit", map[string]any{"session_id": osid, "text": "operator"})))
				op.wait("operator turn", isEvent("message.complete", osid))
				require.Equal(t, requests+1, len(w.llm.Requests()), "no further model request of the revoked turn")
			})
		}
	}
}

// The key cache reads .env again when the file changes in place, is
// replaced, or goes.
func TestTenantKeyCacheFollowsTheFile(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	bp, err := f.homes.Get("b")
	require.NoError(t, err)
	conn := &boundConn{memConn: newConn("b"), tenant: "b", credential: "k1"}
	require.False(t, f.srv.credentialOf(conn, bp), "no key yet")
	require.NoError(t, bp.SetEnv(TenantKeyEnv, "k1")) // replaced (rename)
	require.True(t, f.srv.credentialOf(conn, bp))
	require.True(t, f.srv.credentialOf(conn, bp), "cached")
	require.NoError(t, os.WriteFile(bp.File(".env"), []byte("K=key-1\nAPI_SERVER_KEY=k2\n"), 0o600)) // in place
	require.False(t, f.srv.credentialOf(conn, bp), "an in-place edit is seen")
	require.NoError(t, os.Remove(bp.File(".env")))
	require.False(t, f.srv.credentialOf(conn, bp), "a removed .env holds no key")
}

// A .env that cannot be read (here a folder in its place) refuses the
// call, but revokes nothing: once the file is back the connection is
// served again.
func TestUnreadableEnvRefusesWithoutRevoking(t *testing.T) {
	t.Parallel()
	w := newWSWorld(t, nil)
	c := w.dial("key-of-b")
	sid := c.create()
	bp, err := w.homes.Get("b")
	require.NoError(t, err)
	env, err := os.ReadFile(bp.File(".env"))
	require.NoError(t, err)
	require.NoError(t, os.Rename(bp.File(".env"), bp.File(".env.aside")))
	require.NoError(t, os.Mkdir(bp.File(".env"), 0o700))
	res := c.call("prompt.submit", map[string]any{"session_id": sid, "text": "hello"})
	require.Equal(t, rpc.CodeForbidden, code(res), "%v", res)
	require.NotContains(t, res["error"].(map[string]any)["message"], "revoked")
	require.NoError(t, os.Remove(bp.File(".env")))
	require.NoError(t, os.WriteFile(bp.File(".env"), env, 0o600))
	require.Equal(t, 0, code(c.call("prompt.submit", map[string]any{"session_id": sid, "text": "hello"})), "the session lives on")
	require.Equal(t, "complete", payloadOf(c.wait("the turn", isEvent("message.complete", sid)))["status"])
	require.False(t, c.has(isEvent("error", "")), "no revocation")
}

// A plugin's nested call made as a session of a revoked connection (a
// tool, or the llm facade) is refused, and revokes the connection.
func TestNestedCallsOfARevokedSessionAreRefused(t *testing.T) {
	t.Parallel()
	w := newWSWorld(t, nil)
	c := w.dial("key-of-b")
	sid := c.create()
	bp, err := w.homes.Get("b")
	require.NoError(t, err)
	_, err = w.srv.DispatchTool(context.Background(), sid, "mark", nil)
	require.NoError(t, err, "control: the nested call runs")
	require.Equal(t, int64(1), w.tools.Load())
	requests := len(w.llm.Requests())
	_, err = w.srv.Facade(context.Background(), sid, "llm", "complete", []string{"control"})
	require.NoError(t, err, "control: the llm facade answers")
	require.Equal(t, requests+1, len(w.llm.Requests()))

	require.NoError(t, bp.SetEnv(TenantKeyEnv, "rotated-key-of-b"))
	_, err = w.srv.Facade(context.Background(), sid, "llm", "complete", []string{"after"})
	require.ErrorIs(t, err, ErrRevoked)
	_, err = w.srv.DispatchTool(context.Background(), sid, "mark", nil)
	require.Error(t, err)
	require.Equal(t, int64(1), w.tools.Load(), "no nested tool ran")
	require.Equal(t, requests+1, len(w.llm.Requests()), "no nested model request")
	c.wait("the revocation's error event", isEvent("error", ""))
}
