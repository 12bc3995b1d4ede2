package server

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
)

// callWithID dispatches a request with a chosen id from conn and waits for
// the reply to that id among the frames conn received from from on.
func (f *fixture) callWithID(conn *boundConn, id int, method string, params any) map[string]any {
	f.t.Helper()
	from := conn.count()
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	require.NoError(f.t, err)
	f.d.Dispatch(context.Background(), conn, b)
	return conn.waitFrom(f.t, from, method, func(m map[string]any) bool { return m["id"] == float64(id) })
}

// Two tenants' connections send one request, byte for byte, id included:
// each gets a session of its own profile. Under the request-replay-cache
// fault the second is answered from the first's cached reply: the
// launch tenant's session id and profile reach b (the positive control
// of colliding-inputs' collide-methods phase).
func TestReplayedRequestIsAnsweredPerConnection(t *testing.T) {
	t.Parallel()
	eachSeeded(t, faults.RequestReplayCache, func(t *testing.T, f *fixture, seeded bool) {
		conns := map[string]*boundConn{}
		for _, p := range []string{"", "b"} {
			prof, err := f.homes.Get(p)
			require.NoError(t, err)
			key := "key-of-" + prof.Name
			require.NoError(t, prof.SetEnv(TenantKeyEnv, key))
			conns[p] = &boundConn{memConn: newConn("conn-" + prof.Name), tenant: prof.Name, credential: key}
		}
		result := func(m map[string]any) map[string]any {
			require.Zero(t, code(m), "%v", m)
			return m["result"].(map[string]any)
		}
		a := result(f.callWithID(conns[""], 46, "session.create", map[string]any{}))
		b := result(f.callWithID(conns["b"], 46, "session.create", map[string]any{}))
		info := b["info"].(map[string]any)
		if seeded {
			require.Equal(t, a["session_id"], b["session_id"], "the fault answers b with the launch tenant's reply")
			require.Equal(t, a["info"].(map[string]any)["profile_name"], info["profile_name"])
			return
		}
		require.NotEqual(t, a["session_id"], b["session_id"])
		require.Equal(t, "b", info["profile_name"])
		again := result(f.callWithID(conns["b"], 46, "session.create", map[string]any{}))
		require.NotEqual(t, b["session_id"], again["session_id"], "a repeated id is a new request")
	})
}

// waitFrom is wait for a frame at or after index from: a reply to an id
// the connection used before is not the one awaited.
func (c *memConn) waitFrom(t *testing.T, from int, what string, pred func(map[string]any) bool) map[string]any {
	t.Helper()
	return c.waitFor(t, from, what, false, pred)
}
