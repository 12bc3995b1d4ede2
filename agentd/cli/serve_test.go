package cli_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
)

// cronRan polls cron.list until the job has a last run, and returns its status.
func cronRan(t *testing.T, a *agentd, profile, id string) string {
	t.Helper()
	status := ""
	require.Eventually(t, func() bool {
		params := map[string]any{}
		if profile != "" {
			params["profile"] = profile
		}
		for _, j := range a.ok("cron.list", params)["jobs"].([]any) {
			job := j.(map[string]any)
			if job["id"] == id && job["last_run"] != nil {
				status, _ = job["last_status"].(string)
				return true
			}
		}
		return false
	}, 60*time.Second, 50*time.Millisecond, "cron job %s of %q never ran", id, profile)
	return status
}

func TestServePooledProfilesInterleavedWithCron(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	all := []*tenant{w.addTenant("alpha", true), w.addTenant("beta", false), w.addTenant("gamma", false)}
	s := w.startServe([]string{"--cron", "--cron-interval", "100ms"})

	conns := map[string]*agentd{}
	sids := map[string]string{}
	for _, tn := range all {
		c := s.dial()
		conns[tn.name] = c
		sid, res := c.create(tn.profile)
		require.Equal(t, tn.model, res["info"].(map[string]any)["model"], tn.name)
		sids[tn.name] = sid
	}
	// Interleaved: every tenant's turn submitted before any completes, twice.
	for round := 1; round <= 2; round++ {
		for _, tn := range all {
			conns[tn.name].submit(sids[tn.name], "probe")
		}
		for _, tn := range all {
			require.Equal(t, "complete", conns[tn.name].waitComplete(sids[tn.name], round)["status"], tn.name)
		}
	}
	// A cron fire per tenant, by the ticker, each in its own scope.
	jobs := map[string]string{}
	for _, tn := range all {
		res := conns[tn.name].ok("cron.create", map[string]any{"profile": tn.profile, "name": "job-" + tn.name,
			"prompt": "cron-canary-" + tn.name + ": run the probe", "every": "every 1h"})
		jobs[tn.name] = res["job"].(map[string]any)["id"].(string)
		conns[tn.name].ok("cron.trigger", map[string]any{"profile": tn.profile, "id": jobs[tn.name]})
	}
	for _, tn := range all {
		require.Equal(t, "ok", cronRan(t, conns[tn.name], tn.profile, jobs[tn.name]), tn.name)
	}

	for _, tn := range all {
		results := toolResults(tn.srv)
		require.Len(t, results, 3, "%s: two turns and one cron job", tn.name)
		for _, r := range results {
			env, cwd, _ := snapshot(t, r)
			require.Equal(t, tn.workdir, cwd, tn.name)
			require.Equal(t, tn.marker, env["ENV_MARKER"], tn.name)
			require.Equal(t, tn.home, env["HOME"], tn.name)
		}
		cronReqs := 0
		for _, r := range tn.srv.Requests() {
			require.Equal(t, tn.key, r.Auth, tn.name)
			require.Equal(t, tn.model, r.Model(), tn.name)
			if strings.Contains(string(r.RawBody), "cron-canary-"+tn.name) {
				cronReqs++
			}
		}
		require.Equal(t, 2, cronReqs, "%s's cron job reached its own provider (tool call and answer)", tn.name)
		for _, other := range all {
			if other == tn {
				continue
			}
			foreign := []string{other.key, other.marker, other.model, other.soul, other.shellState, other.workdir, "cron-canary-" + other.name}
			for _, r := range tn.srv.Requests() {
				for _, f := range foreign {
					require.NotContains(t, string(r.RawBody), f, "%s's provider got %s's data", tn.name, other.name)
				}
			}
			// No frame sent to this tenant's connection carries another's data.
			for _, line := range conns[tn.name].raw {
				for _, f := range foreign {
					require.NotContains(t, line, f, "%s's connection got %s's data", tn.name, other.name)
				}
			}
		}
		// Positive control: this tenant's own frames do carry its data.
		require.Contains(t, strings.Join(conns[tn.name].raw, "\n"), tn.model)
	}

	// A session belongs to its connection.
	require.Equal(t, 4030, conns["beta"].errCode("prompt.submit", map[string]any{"session_id": sids["alpha"], "text": "x"}))
	require.Equal(t, 4030, conns["beta"].errCode("config.set", map[string]any{"key": "prompt", "value": "x", "session_id": sids["alpha"]}))
	for _, e := range conns["beta"].events(sids["alpha"]) {
		t.Fatalf("beta's connection received alpha's event %v", e)
	}
	for _, tn := range all {
		require.NotEmpty(t, tenantProcs(tn), "positive control: %s's shell runs while agentd serve does", tn.name)
	}
	s.stop()
	for _, tn := range all {
		require.Eventually(t, func() bool { return len(tenantProcs(tn)) == 0 }, 10*time.Second, 10*time.Millisecond,
			"a process of %s survived agentd serve", tn.name)
	}
}

func TestServeTokenHealthAndPortInUse(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.addTenant("alpha", true)
	s := w.startServe(nil)
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/api/health", s.port))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	for _, tok := range []string{"", "wrong-" + s.token} {
		_, resp, err := websocket.DefaultDialer.Dial(s.url(tok), nil)
		require.Error(t, err)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}
	c := s.dial()
	sid, _ := c.create("")
	require.Equal(t, "complete", c.turn(sid, "probe")["status"])

	// Another agentd on the same port: exit 75 naming the port.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	_, stderr, code := w.run("serve", "--host", "127.0.0.1", "--port", fmt.Sprint(port))
	require.Equal(t, 75, code)
	require.Contains(t, stderr, fmt.Sprintf("port %d", port))
	s.stop()
}

func TestServeRestartAndResume(t *testing.T) {
	t.Parallel()
	w, _, beta := alphaBetaWorld(t)
	s, c := w.serveDialed()
	sid, res := c.create("beta")
	stored := res["stored_session_id"].(string)
	c.turn(sid, "first question")
	s.stop()

	s = w.startServe(nil)
	c = s.dial()
	res = c.ok("session.resume", map[string]any{"session_id": stored, "profile": "beta"})
	c.turn(res["session_id"].(string), "second question")
	recs := beta.srv.RequestsOf(fakellm.KindMain)
	require.Len(t, recs, 4)
	require.Contains(t, string(recs[2].RawBody), "first question")
	require.Contains(t, string(recs[2].RawBody), "second question")
	s.stop()
}

func TestServeProfileLifecycleUnderLoad(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	alpha := w.addTenant("alpha", true)
	s, c := w.serveDialed()
	sa, _ := c.create("")

	// A profile created over RPC is served on its next request and gets no
	// secret of anyone.
	res := c.ok("profiles.create", map[string]any{"name": "delta"})
	home := res["path"].(string)
	for _, f := range []string{"config.yaml", ".env"} {
		require.Empty(t, mustRead(t, filepath.Join(home, f)))
	}
	delta := &tenant{name: "delta", profile: "delta", home: home, key: "sk-prov-delta-" + tag(), marker: "envmark-delta-" + tag(), model: "model-delta-" + tag(), shellState: "shellstate-delta"}
	delta.workdir = w.workdirOf("delta", "delta")
	require.NoError(t, os.MkdirAll(delta.workdir, 0o700))
	srv, err := fakellm.New(fakellm.Options{Keys: []string{delta.key}, Responder: delta.respond})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	delta.srv = srv
	writeFile(t, filepath.Join(home, "config.yaml"), "model:\n  base_url: "+srv.BaseURL+"\n  default: "+delta.model+"\n  key_env: TENANT_PROVIDER_KEY\nterminal:\n  cwd: "+delta.workdir+"\n")
	writeFile(t, filepath.Join(home, ".env"), "TENANT_PROVIDER_KEY="+delta.key+"\nENV_MARKER="+delta.marker+"\n")

	d := s.dial()
	sd, _ := d.create("delta")
	// Load on alpha while delta turns and is then deleted from the command line.
	c.submit(sa, "probe")
	require.Equal(t, "complete", d.turn(sd, "probe")["status"])
	require.Equal(t, "complete", c.waitComplete(sa, 1)["status"])
	env, cwd, _ := snapshot(t, toolResults(srv)[0])
	require.Equal(t, delta.workdir, cwd)
	require.Equal(t, delta.marker, env["ENV_MARKER"])
	require.NotContains(t, toolResults(srv)[0], alpha.key)

	_, stderr, code := w.run("profile", "delete", "delta")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, 4064, d.errCode("session.create", map[string]any{"profile": "delta"}))
	require.Equal(t, "error", d.turn(sd, "again")["status"], "a deleted profile's live session ends its turn with an error")
	require.Len(t, srv.RequestsOf(fakellm.KindMain), 2, "nothing more reached the deleted profile's provider")
	require.Equal(t, "complete", c.turn(sa, "still served")["status"], "the server keeps serving the others")
	s.stop()
}

func TestServeSettingsWritesBySessionAndByProfile(t *testing.T) {
	t.Parallel()
	w, alpha, beta := alphaBetaWorld(t)
	gamma := w.addTenant("gamma", false)
	s := w.startServe(nil)
	cb, cg := s.dial(), s.dial()
	sb, _ := cb.create("beta")
	before := map[string]string{}
	for _, tn := range []*tenant{alpha, gamma} {
		before[tn.name] = string(mustRead(t, filepath.Join(tn.home, "config.yaml")))
	}
	cb.ok("config.set", map[string]any{"key": "prompt", "value": "custom-beta", "session_id": sb})
	cb.ok("config.set", map[string]any{"key": "model", "value": "model-beta-2", "session_id": sb})
	for _, tn := range []*tenant{alpha, gamma} {
		require.Equal(t, before[tn.name], string(mustRead(t, filepath.Join(tn.home, "config.yaml"))), tn.name)
	}
	cg.ok("config.set", map[string]any{"key": "prompt", "value": "custom-gamma", "profile": "gamma"})
	require.Equal(t, before["alpha"], string(mustRead(t, filepath.Join(alpha.home, "config.yaml"))))
	require.NotContains(t, string(mustRead(t, filepath.Join(beta.home, "config.yaml"))), "custom-gamma")

	cb.turn(sb, "probe")
	recs := beta.srv.RequestsOf(fakellm.KindMain)
	require.Equal(t, "model-beta-2", recs[0].Model(), "the next turn sees the write")
	require.Contains(t, string(recs[0].RawBody), "custom-beta")
	require.NotContains(t, string(recs[0].RawBody), "custom-gamma")
	s.stop()
}
