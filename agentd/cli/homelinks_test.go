package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/rpc"
)

// linkTo replaces file in tn's home with a symlink to target, as the
// tenant's own terminal could.
func linkTo(t *testing.T, tn *tenant, file, target string) {
	t.Helper()
	p := filepath.Join(tn.home, file)
	require.NoError(t, os.Remove(p))
	require.NoError(t, os.Symlink(target, p))
}

// TestHomeLinksLive: on a live `agentd serve`, three tenants replace a
// file of their own home with a link into alpha's: beta's SOUL.md and
// MEMORY.md point at alpha's .env, gamma's config.yaml at alpha's, delta's
// .env at alpha's SOUL.md. Each is refused with an error naming the file
// and the rule; no byte of alpha's reaches their providers or their
// connection. With home-follows-links seeded, beta's provider gets alpha's
// key in the system prompt (the positive control).
func TestHomeLinksLive(t *testing.T) {
	t.Parallel()
	defendedAndSeeded(t, "home-follows-links", func(t *testing.T, seeded bool, env []string) {
		w, alpha, beta := alphaBetaWorld(t)
		gamma := w.addTenant("gamma", false)
		delta := w.addTenant("delta", false)
		linkTo(t, beta, "SOUL.md", filepath.Join(alpha.home, ".env"))
		linkTo(t, beta, "memories/MEMORY.md", filepath.Join(alpha.home, ".env"))
		linkTo(t, gamma, "config.yaml", filepath.Join(alpha.home, "config.yaml"))
		linkTo(t, delta, ".env", filepath.Join(alpha.home, "SOUL.md"))
		s := w.startServe(nil, env...)
		c := s.dial()
		foreign := []string{alpha.key, alpha.marker, alpha.soul, alpha.model}

		sid, _ := c.create(beta.profile)
		r := c.call("prompt.submit", map[string]any{"session_id": sid, "text": "hello"})
		if r["error"] == nil {
			c.waitComplete(sid, 1)
		}
		if seeded {
			require.Eventually(t, func() bool {
				for _, req := range beta.srv.Requests() {
					if strings.Contains(string(req.RawBody), alpha.key) {
						return true
					}
				}
				return false
			}, 30*time.Second, 20*time.Millisecond, "the fault sends alpha's key to beta's provider")
			s.stop()
			return
		}
		gc := c.call("session.create", map[string]any{"profile": gamma.profile})
		require.NotNil(t, gc["error"], "gamma's linked config.yaml is refused: %v", gc)
		dc := c.call("session.create", map[string]any{"profile": delta.profile})
		require.NotNil(t, dc["error"], "delta's linked .env is refused: %v", dc)
		for who, r := range map[string]map[string]any{"gamma": gc, "delta": dc} {
			e, _ := r["error"].(map[string]any)
			require.EqualValues(t, rpc.CodeLinkOut, e["code"], "%s's refusal is a link-out (4013), not an internal error: %v", who, r)
		}

		frames := strings.Join(c.raw, "\n")
		for _, f := range []string{"home file SOUL.md is a link out of the home", "home file config.yaml is a link out of the home",
			"home file .env is a link out of the home"} {
			require.Contains(t, frames, f, "the error names the file and the rule")
		}
		for _, tn := range []*tenant{beta, gamma, delta} {
			for _, req := range tn.srv.Requests() {
				for _, f := range foreign {
					require.NotContains(t, string(req.RawBody), f, "%s's provider got alpha's data", tn.name)
				}
			}
		}
		for _, f := range foreign {
			require.NotContains(t, frames, f, "a frame carries alpha's data")
		}
		s.stop()
	})
}
