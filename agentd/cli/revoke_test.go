package cli_test

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Over the real binary and a real websocket: beta's tenant connection,
// after the operator rotates beta's API_SERVER_KEY in its .env, is refused
// (4030) a turn and a settings write on the session it already holds, and
// nothing reaches beta's provider or files. With stale-credential the
// stale key is served (the positive control).
func TestServeRefusesARotatedTenantKeyOnALiveConnection(t *testing.T) {
	t.Parallel()
	defendedAndSeeded(t, "stale-credential", func(t *testing.T, seeded bool, env []string) {
		w, _, beta := alphaBetaWorld(t)
		envPath := filepath.Join(beta.home, ".env")
		base, err := os.ReadFile(envPath)
		require.NoError(t, err)
		old := "ask-beta-old-" + tag()
		writeFile(t, envPath, string(base)+"API_SERVER_KEY="+old+"\n")
		s := w.startServe(nil, env...)
		c := s.dialToken(old)
		sid, info := c.create("")
		require.Equal(t, "beta", info["info"].(map[string]any)["profile_name"], "the key binds the connection to beta")
		require.Equal(t, "complete", c.turn(sid, "control")["status"], "control: the tenant's turn runs")
		requests := len(beta.srv.Requests())

		writeFile(t, envPath, string(base)+"API_SERVER_KEY=ask-beta-new-"+tag()+"\n") // the operator rotates it
		config := string(mustRead(t, filepath.Join(beta.home, "config.yaml")))
		if seeded {
			require.Equal(t, "complete", c.turn(sid, "stale")["status"], "the seeded fault: the stale key runs a turn")
			require.Greater(t, len(beta.srv.Requests()), requests)
			c.ok("config.set", map[string]any{"session_id": sid, "key": "prompt", "value": "stale-write"})
			require.NotEqual(t, config, string(mustRead(t, filepath.Join(beta.home, "config.yaml"))))
			s.stop()
			return
		}
		require.Equal(t, 4030, c.errCode("prompt.submit", map[string]any{"session_id": sid, "text": "stale"}))
		require.Equal(t, 4030, c.errCode("config.set", map[string]any{"session_id": sid, "key": "prompt", "value": "stale-write"}))
		require.Equal(t, 4030, c.errCode("session.close", map[string]any{"session_id": sid}))
		c.waitFor("the revocation's error event", func(m map[string]any) bool { return eventType(m) == "error" })
		require.Equal(t, requests, len(beta.srv.Requests()), "nothing reached beta's provider")
		require.Equal(t, config, string(mustRead(t, filepath.Join(beta.home, "config.yaml"))), "beta's config is unchanged")
		s.stop()
	})
}

// profiles.rotate_key: only the operator may call it; the old key is
// refused from its reply on (the live connection's sessions end, a new
// connection gets 401), the new one opens the profile, and an empty key
// disables the tenant.
func TestServeRotateKeyRevokesTheOldKeyAtOnce(t *testing.T) {
	t.Parallel()
	w, _, beta := alphaBetaWorld(t)
	old := tenantKey(t, beta)
	s := w.startServe(nil)
	c := s.dialToken(old)
	sid, _ := c.create("")
	require.Equal(t, 4030, c.errCode("profiles.rotate_key", map[string]any{"name": "beta", "key": "mine-now"}), "a tenant may not rotate keys")
	op := s.dial()
	next := "ask-beta-next-" + tag()
	op.ok("profiles.rotate_key", map[string]any{"name": "beta", "key": next})
	c.waitFor("the revocation's error event", func(m map[string]any) bool { return eventType(m) == "error" })
	require.Equal(t, 4030, c.errCode("prompt.submit", map[string]any{"session_id": sid, "text": "stale"}))
	require.Equal(t, http.StatusUnauthorized, s.dialStatus(old))
	n := s.dialToken(next)
	_, info := n.create("")
	require.Equal(t, "beta", info["info"].(map[string]any)["profile_name"])
	op.ok("profiles.rotate_key", map[string]any{"name": "beta"})
	require.Equal(t, http.StatusUnauthorized, s.dialStatus(next), "an empty key disables the tenant")
	require.Equal(t, 4064, op.errCode("profiles.rotate_key", map[string]any{"name": "nobody"}))
	s.stop()
}
