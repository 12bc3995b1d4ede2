package cli_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/internal/storeproc"
)

// Cluster mode over the real binary: replicas are `agentd serve`
// children on one set of homes, over a real PostgreSQL and a real Redis
// (package storeproc). Each test has a Redis and a PostgreSQL database of
// its own; the PostgreSQL server is shared by the package's tests (its
// start is the slow part) and stopped by TestMain.

var sharedPostgres struct {
	once sync.Once
	dir  string
	srv  *storeproc.Server
	err  error
	dbs  atomic.Int64
}

func stopSharedPostgres() {
	if sharedPostgres.srv != nil {
		_ = sharedPostgres.srv.Stop()
	}
	if sharedPostgres.dir != "" {
		_ = os.RemoveAll(sharedPostgres.dir)
	}
}

// clusterStores returns the URLs of a fresh PostgreSQL database and a
// fresh Redis for one test; it skips the test when a server program is
// missing.
func clusterStores(t *testing.T) (pgURL, redisURL string) {
	t.Helper()
	for _, k := range storeproc.Kinds {
		if err := storeproc.Available(k); err != nil {
			t.Skipf("%v (.ci/run installs it)", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sp := &sharedPostgres
	sp.once.Do(func() {
		if sp.dir, sp.err = os.MkdirTemp("", "agentd-cluster-pg-"); sp.err == nil {
			sp.srv, sp.err = storeproc.Start(ctx, storeproc.Postgres, sp.dir)
		}
	})
	require.NoError(t, sp.err)
	db := fmt.Sprintf("agentd_t%d", sp.dbs.Add(1))
	conn, err := pgx.Connect(ctx, sp.srv.URL)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+db)
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	pgURL = strings.Replace(sp.srv.URL, "/postgres?", "/"+db+"?", 1)
	require.NotEqual(t, sp.srv.URL, pgURL, "the database is named in the URL's path")

	rd, err := storeproc.Start(ctx, storeproc.Redis, t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = rd.Stop() })
	return pgURL, rd.URL
}

// replicas starts n `agentd serve` replicas of w over one cluster.
func (w *world) replicas(t *testing.T, n int, extraArgs []string, env []string) []*served {
	t.Helper()
	pg, rd := clusterStores(t)
	var out []*served
	for i := range n {
		args := append([]string{"--postgres", pg, "--redis", rd, "--replica", fmt.Sprintf("r%d", i+1)}, extraArgs...)
		out = append(out, w.startServe(args, env...))
	}
	return out
}

// tenantKey gives tn's profile a tenant credential and returns it.
func tenantKey(t *testing.T, tn *tenant) string {
	t.Helper()
	key := "ask-" + tn.name + "-" + tag()
	f, err := os.OpenFile(filepath.Join(tn.home, ".env"), os.O_APPEND|os.O_WRONLY, 0o600)
	require.NoError(t, err)
	_, err = f.WriteString("API_SERVER_KEY=" + key + "\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return key
}

// dialStatus is the HTTP status a websocket dial with token gets.
func (s *served) dialStatus(token string) int {
	s.t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial(s.url(token), nil)
	if err == nil {
		ws.Close()
		return http.StatusSwitchingProtocols
	}
	require.NotNil(s.t, resp, "dial: %v", err)
	return resp.StatusCode
}

// hasFrame reports whether any frame a received holds text.
func (a *agentd) hasFrame(text string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.raw {
		if strings.Contains(r, text) {
			return true
		}
	}
	return false
}

// TestClusterServeNeedsBothStores: --postgres without --redis (or the
// other way round) is a usage error, and an agentd with neither is the
// single agentd it always was.
func TestClusterServeNeedsBothStores(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	_, stderr, code := w.run("serve", "--port", "0", "--postgres", "postgres://x@127.0.0.1:1/x")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "needs both --postgres and --redis")
	_, stderr, code = w.run("serve", "--port", "0", "--redis", "redis://127.0.0.1:1/0")
	require.Equal(t, 2, code, stderr)
}

// TestClusterResumesOnAnotherReplica: a session created and played on
// replica 1 is resumed on replica 2 by the same tenant, its history
// loaded from PostgreSQL (replica 1's connection is told the session
// moved), and refused (4044) to another tenant. With resume-wrong-profile
// the other tenant resumes it, history and all.
func TestClusterResumesOnAnotherReplica(t *testing.T) {
	t.Parallel()
	defendedAndSeeded(t, "resume-wrong-profile", func(t *testing.T, seeded bool, env []string) {
		w, alpha, beta := alphaBetaWorld(t)
		ka, kb := tenantKey(t, alpha), tenantKey(t, beta)
		rs := w.replicas(t, 2, nil, env)
		a1 := rs[0].dialToken(ka)
		sid, res := a1.create("")
		stored := res["stored_session_id"].(string)
		require.Equal(t, "complete", a1.turn(sid, "probe")["status"])

		a2 := rs[1].dialToken(ka)
		again := a2.ok("session.resume", map[string]any{"session_id": stored})
		require.Equal(t, "default", again["info"].(map[string]any)["profile_name"])
		require.Greater(t, again["messages"], float64(0), "the history came from PostgreSQL")
		a1.waitFor("session.moved on replica 1", func(m map[string]any) bool { return eventType(m) == "session.moved" })

		b2 := rs[1].dialToken(kb)
		if seeded {
			stolen := b2.ok("session.resume", map[string]any{"session_id": stored})
			require.Greater(t, stolen["messages"], float64(0), "the seeded fault: beta resumes alpha's session and history")
			return
		}
		require.Equal(t, 4044, b2.errCode("session.resume", map[string]any{"session_id": stored}))
		require.Equal(t, 4030, b2.errCode("session.resume", map[string]any{"session_id": stored, "profile": "default"}))
		for _, r := range rs {
			r.stop()
		}
	})
}

// TestClusterRevocationReachesEveryReplica: with the auth cache on, a
// tenant whose key the operator rotates through replica 1
// (profiles.rotate_key) is refused on replica 2
// right after: its live connection there (4030, and an error event) and a
// new connection with the old key (401). With revocation-local-only
// replica 2 keeps serving the old key from its cache.
func TestClusterRevocationReachesEveryReplica(t *testing.T) {
	t.Parallel()
	defendedAndSeeded(t, "revocation-local-only", func(t *testing.T, seeded bool, env []string) {
		w, _, beta := alphaBetaWorld(t)
		old := tenantKey(t, beta)
		rs := w.replicas(t, 2, []string{"--auth-cache-ttl", "1m"}, env)
		c1, c2 := rs[0].dialToken(old), rs[1].dialToken(old)
		sid, _ := c2.create("")
		require.Equal(t, "complete", c2.turn(sid, "control")["status"], "control: the key works on replica 2")
		requests := len(beta.srv.Requests())

		op := rs[0].dial() // the operator rotates beta's key through replica 1
		op.ok("profiles.rotate_key", map[string]any{"name": "beta", "key": "ask-beta-new-" + tag()})
		require.Equal(t, 4030, c1.errCode("session.create", map[string]any{}), "replica 1 refuses the old key")
		if seeded {
			require.Equal(t, "complete", c2.turn(sid, "stale")["status"], "the seeded fault: replica 2 still serves the old key")
			require.Greater(t, len(beta.srv.Requests()), requests)
			require.Equal(t, http.StatusSwitchingProtocols, rs[1].dialStatus(old), "the seeded fault: replica 2 opens a connection to the old key")
			return
		}
		require.Equal(t, 4030, c2.errCode("prompt.submit", map[string]any{"session_id": sid, "text": "stale"}))
		c2.waitFor("the revocation's error event", func(m map[string]any) bool { return eventType(m) == "error" })
		require.Equal(t, requests, len(beta.srv.Requests()), "nothing reached beta's provider")
		require.Equal(t, http.StatusUnauthorized, rs[1].dialStatus(old))
		for _, r := range rs {
			r.stop()
		}
	})
}

// TestClusterEventsStayInTheirTenant: a setting alpha writes on replica 1
// reaches alpha's session on replica 2 (config.changed), never beta's
// there; with events-unscoped it reaches beta's too.
func TestClusterEventsStayInTheirTenant(t *testing.T) {
	t.Parallel()
	defendedAndSeeded(t, "events-unscoped", func(t *testing.T, seeded bool, env []string) {
		w, alpha, beta := alphaBetaWorld(t)
		ka, kb := tenantKey(t, alpha), tenantKey(t, beta)
		rs := w.replicas(t, 2, nil, env)
		a1, b1 := rs[0].dialToken(ka), rs[0].dialToken(kb)
		a2, b2 := rs[1].dialToken(ka), rs[1].dialToken(kb)
		a2.create("")
		b2.create("")
		canaryA, canaryB := "prompt-canary-alpha-"+tag(), "prompt-canary-beta-"+tag()
		a1.ok("config.set", map[string]any{"key": "prompt", "value": canaryA})
		a2.waitFor("alpha's setting on replica 2", func(m map[string]any) bool {
			p, _ := m["params"].(map[string]any)
			pl, _ := p["payload"].(map[string]any)
			return eventType(m) == "config.changed" && pl["value"] == canaryA
		})
		if seeded {
			b2.waitFor("the seeded fault: alpha's setting on beta's connection", func(m map[string]any) bool {
				p, _ := m["params"].(map[string]any)
				pl, _ := p["payload"].(map[string]any)
				return pl["value"] == canaryA
			})
			return
		}
		// Replica 2 hands events out in the order Redis sent them: once
		// beta's own later event reached b2, alpha's was handed out.
		b1.ok("config.set", map[string]any{"key": "prompt", "value": canaryB})
		b2.waitFor("beta's own setting on replica 2", func(m map[string]any) bool {
			p, _ := m["params"].(map[string]any)
			pl, _ := p["payload"].(map[string]any)
			return pl["value"] == canaryB
		})
		require.False(t, b2.hasFrame(canaryA), "alpha's setting reached beta's connection")
		require.False(t, a2.hasFrame(canaryB), "beta's setting reached alpha's connection")
		for _, r := range rs {
			r.stop()
		}
	})
}

// TestClusterResponseCacheIsPerTenant: two tenants whose provider
// requests are byte-identical each get their own provider's answer, over
// the response cache, on different replicas; with cache-key-no-tenant the
// second gets the first's answer and its own provider hears nothing.
func TestClusterResponseCacheIsPerTenant(t *testing.T) {
	t.Parallel()
	defendedAndSeeded(t, "cache-key-no-tenant", func(t *testing.T, seeded bool, env []string) {
		w, alpha, beta := alphaBetaWorld(t)
		ka, kb := tenantKey(t, alpha), tenantKey(t, beta)
		answers := map[string]string{}
		for _, tn := range []*tenant{alpha, beta} {
			answer := "answer-of-" + tn.name + "-" + tag()
			answers[tn.name] = answer
			srv, err := fakellm.New(fakellm.Options{Keys: []string{tn.key}, Model: "same-model",
				Responder: func(fakellm.Record) fakellm.Response { return fakellm.Text(answer) }})
			require.NoError(t, err)
			t.Cleanup(srv.Close)
			tn.srv = srv
			// The same model, soul, memory and cwd: the same request body.
			writeFile(t, filepath.Join(tn.home, "config.yaml"), fmt.Sprintf(
				"model:\n  provider: custom\n  base_url: %s\n  default: same-model\n  key_env: TENANT_PROVIDER_KEY\nmemory:\n  memory_enabled: false\n", srv.BaseURL))
			writeFile(t, filepath.Join(tn.home, "SOUL.md"), "You are helpful.\n")
		}
		rs := w.replicas(t, 2, []string{"--response-cache-ttl", "1m"}, env)
		a1, b2 := rs[0].dialToken(ka), rs[1].dialToken(kb)
		sa, _ := a1.create("")
		require.Equal(t, answers["alpha"], a1.turn(sa, "the same question")["text"])
		sb, _ := b2.create("")
		got := b2.turn(sb, "the same question")["text"]
		if seeded {
			require.Equal(t, answers["alpha"], got, "the seeded fault: beta gets alpha's answer")
			require.Empty(t, beta.srv.Requests(), "the seeded fault: beta's provider heard nothing")
			return
		}
		require.Equal(t, answers["beta"], got)
		require.Len(t, beta.srv.Requests(), 1)
		// Alpha's own repeat is answered from the cache, on either replica.
		a2 := rs[1].dialToken(ka)
		sa2, _ := a2.create("")
		require.Equal(t, answers["alpha"], a2.turn(sa2, "the same question")["text"])
		require.Len(t, alpha.srv.Requests(), 1, "alpha's repeat came from the cache")
		for _, r := range rs {
			r.stop()
		}
	})
}
