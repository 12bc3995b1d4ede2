package cli_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
)

// floodWorld is alpha (the launch profile, the neighbour) and "flood",
// whose provider hangs on every prompt that says "hold".
func floodWorld(t testing.TB) (*world, *tenant, *tenant) {
	t.Helper()
	w := newWorld(t)
	alpha := w.addTenant("alpha", true)
	fl := w.addTenant("flood", false)
	hold, err := fakellm.New(fakellm.Options{Keys: []string{fl.key}, Responder: func(r fakellm.Record) fakellm.Response {
		if strings.Contains(string(r.RawBody), "hold") {
			return fakellm.Hang()
		}
		return fakellm.Text("ok")
	}})
	require.NoError(t, err)
	t.Cleanup(hold.Close)
	fl.srv = hold
	writeFile(t, filepath.Join(fl.home, "config.yaml"), "model:\n  base_url: "+hold.BaseURL+"\n  default: m\n  key_env: TENANT_PROVIDER_KEY\nterminal:\n  cwd: "+fl.workdir+"\n")
	return w, alpha, fl
}

func (a *agentd) reply(id int) map[string]any {
	a.t.Helper()
	return a.waitFor(fmt.Sprintf("reply #%d", id), func(m map[string]any) bool { return m["id"] == float64(id) && m["method"] == nil })
}

// submitHeld opens sessions on conns and submits a held prompt on each,
// all at once; it returns the submissions' replies.
func submitHeld(t *testing.T, conns []*agentd, perConn int) []map[string]any {
	t.Helper()
	var mu sync.Mutex
	var replies []map[string]any
	var wg sync.WaitGroup
	for _, c := range conns {
		var sids []string
		for range perConn {
			sid, _ := c.create("flood")
			sids = append(sids, sid)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ids []int
			for _, sid := range sids {
				ids = append(ids, c.fire("prompt.submit", map[string]any{"session_id": sid, "text": "hold"}))
			}
			for _, id := range ids {
				r := c.reply(id)
				mu.Lock()
				replies = append(replies, r)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return replies
}

func errorOf(m map[string]any) (int, string, map[string]any) {
	e, ok := m["error"].(map[string]any)
	if !ok {
		return 0, "", nil
	}
	data, _ := e["data"].(map[string]any)
	return int(e["code"].(float64)), e["message"].(string), data
}

// One tenant floods over three connections: held turns past its share and
// a burst of requests. Its turns beyond the queue bounds are refused with
// 4290 and a retry hint, only its share of turns reaches its provider, no
// reply says "database is locked", the neighbour's turn completes, and
// SIGTERM still ends the server cleanly with turns hung on their provider.
func TestAFloodingTenantGetsItsShareAndTheNeighbourIsServed(t *testing.T) {
	t.Parallel()
	w, alpha, fl := floodWorld(t)
	s := w.startServe([]string{"--profile-turns", "2", "--conn-queue", "4", "--profile-queue", "6"})
	flooders := []*agentd{s.dial(), s.dial(), s.dial()}

	replies := submitHeld(t, flooders, 4)
	accepted, refused := 0, 0
	for _, r := range replies {
		code, msg, data := errorOf(r)
		switch code {
		case 0:
			accepted++
		case 4290:
			refused++
			require.Contains(t, msg, "retry after", "a refusal says when to retry")
			require.EqualValues(t, 1000, data["retry_after_ms"])
		default:
			t.Fatalf("a flooding submission failed otherwise: %v", r)
		}
	}
	require.Equal(t, 8, accepted, "two running and six waiting: the profile's share and queue")
	require.Equal(t, 4, refused)
	_, err := fl.srv.WaitRequests(t.Context(), fakellm.KindMain, 2)
	require.NoError(t, err)

	// A burst of requests from every flooding connection at once.
	var wg sync.WaitGroup
	for _, c := range flooders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ids []int
			for i := range 60 {
				switch i % 3 {
				case 0:
					ids = append(ids, c.fire("session.create", map[string]any{"profile": "flood"}))
				case 1:
					ids = append(ids, c.fire("cron.list", map[string]any{"profile": "flood"}))
				default:
					ids = append(ids, c.fire("profiles.list", map[string]any{}))
				}
			}
			for _, id := range ids {
				r := c.reply(id)
				code, msg, _ := errorOf(r)
				if code != 0 && code != 4290 {
					t.Errorf("a flooding request failed otherwise: %v", r)
				}
				if strings.Contains(msg, "database is locked") {
					t.Errorf("a client saw the lock: %v", r)
				}
			}
		}()
	}
	n := s.dial()
	sid, _ := n.create("")
	done := n.turn(sid, "probe")
	wg.Wait()
	require.Equal(t, "complete", done["status"], "the neighbour's turn completes during the flood")
	env, _, _ := snapshot(t, toolResults(alpha.srv)[0])
	require.Equal(t, alpha.marker, env["ENV_MARKER"])
	require.Len(t, fl.srv.RequestsOf(fakellm.KindMain), 2, "only the flood's share of turns reached its provider")
	require.NotContains(t, s.stderr.String(), "database is locked")
	s.stop()
}

// The positive control: with the no-conn-limit fault the same flood is
// all accepted and every held turn reaches the provider at once.
func TestNoConnLimitFaultLetsTheWholeFloodIn(t *testing.T) {
	t.Parallel()
	w, _, fl := floodWorld(t)
	s := w.startServe([]string{"--profile-turns", "2", "--conn-queue", "4", "--profile-queue", "6"}, "AGENTD_FAULTS=no-conn-limit", "AGENTD_ALLOW_FAULTS=1")
	replies := submitHeld(t, []*agentd{s.dial(), s.dial(), s.dial()}, 4)
	for _, r := range replies {
		code, _, _ := errorOf(r)
		require.Zero(t, code, "nothing is refused: %v", r)
	}
	_, err := fl.srv.WaitRequests(t.Context(), fakellm.KindMain, 12)
	require.NoError(t, err, "all twelve held turns run at once")
	s.stop()
}
