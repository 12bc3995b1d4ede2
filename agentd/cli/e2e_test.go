package cli_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/store"
	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

func TestTurnProbeShowsOwnCwdAndEnvMarker(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a := w.addTenant("alpha", true)
	d := w.startTUI()

	sid, res := d.create("")
	info := res["info"].(map[string]any)
	require.Equal(t, a.model, info["model"])
	require.Equal(t, "default", info["profile_name"])
	require.Equal(t, a.workdir, info["cwd"])

	done := d.turn(sid, "run the probe")
	require.Equal(t, map[string]any{"text": "probe done for alpha", "status": "complete"}, done)

	// The turn's events, in order, to this session.
	var types []string
	for _, e := range d.events(sid) {
		types = append(types, e["type"].(string))
	}
	require.Equal(t, []string{"message.start", "tool.start", "tool.complete", "message.start", "message.delta", "message.complete"}[0:3], types[0:3])
	require.Equal(t, "message.complete", types[len(types)-1])
	require.Contains(t, types, "message.delta")
	for _, e := range d.events(sid) {
		if e["type"] == "tool.start" {
			p := e["payload"].(map[string]any)
			require.Equal(t, "terminal", p["name"])
			require.Contains(t, p["args"].(map[string]any)["command"], "SNAPSHOT-BEGIN")
			require.NotEmpty(t, p["tool_id"])
		}
	}

	// The provider saw the profile's key, model and system prompt.
	recs := a.srv.RequestsOf(fakellm.KindMain)
	require.Len(t, recs, 2)
	for _, r := range recs {
		require.Equal(t, a.key, r.Auth)
		require.Equal(t, a.model, r.Model())
		require.Equal(t, 200, r.Status)
	}
	sys := recs[0].Messages()[0]
	require.Equal(t, "system", sys["role"])
	require.Contains(t, sys["content"], a.soul)
	require.Contains(t, sys["content"], "memory-canary-alpha-")

	// The probe ran in the profile's cwd with its .env, HOME and AGENTD_HOME,
	// and nothing credential-shaped from agentd's own environment.
	results := toolResults(a.srv)
	require.Len(t, results, 1)
	env, cwd, _ := snapshot(t, results[0])
	require.Equal(t, a.workdir, cwd)
	require.Equal(t, a.marker, env["ENV_MARKER"])
	require.Equal(t, a.key, env["TENANT_PROVIDER_KEY"], "the profile's own .env reaches its own tools")
	require.Equal(t, a.home, env["HOME"])
	require.Equal(t, a.home, env["AGENTD_HOME"])
	require.NotContains(t, results[0], "sk-agentd-process-secret")
	require.NotContains(t, results[0], "server-token-secret")
	require.NotContains(t, results[0], "AGENTD_TEST_MAIN")
	require.Contains(t, env, "PATH", "the scrubbed base still carries PATH")

	// The turn is in state.db, committed; logs name the key by fingerprint only.
	d.close()
	msgs := storedMessages(t, a.home, res)
	var roles []string
	for _, m := range msgs {
		roles = append(roles, m.Role)
	}
	require.Equal(t, []string{"user", "assistant", "tool", "assistant"}, roles)
	require.Contains(t, msgs[2].Content, a.marker)
	log, err := os.ReadFile(filepath.Join(a.home, "logs", "agent.log"))
	require.NoError(t, err)
	require.Contains(t, string(log), "turn complete")
	require.Contains(t, string(log), "key=sha256:")
	require.NotContains(t, string(log), a.key)
	require.NotContains(t, d.stderr.String(), a.key)
	require.NotContains(t, d.stderr.String(), a.model, "the server's own log holds no tenant data")
}

func TestTwoProfilesInOneProcessNeverMix(t *testing.T) {
	t.Parallel()
	w, alpha, beta := alphaBetaWorld(t)
	d := w.startTUI()

	sa, _ := d.create("")
	sb, res := d.create("beta")
	require.Equal(t, beta.model, res["info"].(map[string]any)["model"])
	require.Equal(t, "beta", res["info"].(map[string]any)["profile_name"])

	// Two rounds of interleaved turns: both submitted before either ends.
	for round := 1; round <= 2; round++ {
		d.submit(sa, "probe")
		d.submit(sb, "probe")
		require.Equal(t, "complete", d.waitComplete(sa, round)["status"])
		require.Equal(t, "complete", d.waitComplete(sb, round)["status"])
	}

	for _, pair := range [][2]*tenant{{alpha, beta}, {beta, alpha}} {
		own, other := pair[0], pair[1]
		results := toolResults(own.srv)
		require.Len(t, results, 2, own.name)
		var pids []string
		for i, r := range results {
			env, cwd, pid := snapshot(t, r)
			pids = append(pids, pid)
			require.Equal(t, own.workdir, cwd, own.name)
			require.Equal(t, own.marker, env["ENV_MARKER"], own.name)
			require.Equal(t, own.key, env["TENANT_PROVIDER_KEY"], own.name)
			require.Equal(t, own.home, env["HOME"])
			for _, foreign := range []string{other.key, other.marker, other.workdir, other.shellState, other.model, other.soul} {
				require.NotContains(t, r, foreign, "%s's probe shows %s's data", own.name, other.name)
			}
			if i == 1 {
				// Positive control: the shell state of the first turn persists.
				require.Equal(t, own.shellState, env["TENANT_SHELL_STATE"], own.name)
			} else {
				require.NotContains(t, env, "TENANT_SHELL_STATE")
			}
		}
		require.Equal(t, pids[0], pids[1], "one persistent shell per session")
		for _, r := range own.srv.Requests() {
			require.Equal(t, own.key, r.Auth)
			require.Equal(t, own.model, r.Model())
			for _, foreign := range []string{other.key, other.marker, other.model, other.soul} {
				require.NotContains(t, string(r.RawBody), foreign)
			}
		}
	}
	_, _, pa := snapshot(t, toolResults(alpha.srv)[0])
	_, _, pb := snapshot(t, toolResults(beta.srv)[0])
	require.NotEqual(t, pa, pb, "each session has its own shell")

	// Events of each session went out under that session only.
	for _, e := range d.events(sa) {
		require.NotContains(t, e["payload"], beta.marker)
	}
	d.close()
}

func TestResumeAfterRestart(t *testing.T) {
	t.Parallel()
	w, _, beta := alphaBetaWorld(t)

	d := w.startTUI()
	sid, res := d.create("beta")
	stored := res["stored_session_id"].(string)
	d.turn(sid, "first question")
	d.close()

	d = w.startTUI()
	require.Equal(t, 4044, d.errCode("session.resume", map[string]any{"session_id": stored}),
		"a beta session is not found in the launch profile's store")
	require.Equal(t, 4044, d.errCode("session.resume", map[string]any{"session_id": "nope", "profile": "beta"}))
	res = d.ok("session.resume", map[string]any{"session_id": stored, "profile": "beta"})
	require.Equal(t, stored, res["stored_session_id"])
	require.NotEqual(t, sid, res["session_id"], "a new live id")
	require.Equal(t, beta.model, res["info"].(map[string]any)["model"])
	sid2 := res["session_id"].(string)
	d.turn(sid2, "second question")

	recs := beta.srv.RequestsOf(fakellm.KindMain)
	require.Len(t, recs, 4)
	var texts []string
	for _, m := range recs[2].Messages() {
		if c, ok := m["content"].(string); ok && m["role"] == "user" {
			texts = append(texts, c)
		}
	}
	require.Equal(t, []string{"first question", "second question"}, texts, "the resumed turn carries the stored history")
	require.Len(t, toolResults(beta.srv), 2)
	d.close()
}

func TestCronTickFiresEachJobInItsOwnProfile(t *testing.T) {
	t.Parallel()
	w, alpha, beta := alphaBetaWorld(t)
	gamma := w.addTenant("gamma", false)

	// One job over RPC, one on the command line; gamma's is never triggered.
	d := w.startTUI()
	res := d.ok("cron.create", map[string]any{"profile": "beta", "name": "b-job", "prompt": "cron-canary-beta: run the probe", "every": "every 1h"})
	bJob := res["job"].(map[string]any)["id"].(string)
	require.Equal(t, -32602, d.errCode("cron.create", map[string]any{"name": "x", "prompt": "p", "every": "sometimes"}))
	require.Equal(t, 4064, d.errCode("cron.create", map[string]any{"profile": "nobody", "prompt": "p", "every": "1h"}))
	d.ok("cron.trigger", map[string]any{"profile": "beta", "id": bJob})
	require.Equal(t, -32602, d.errCode("cron.trigger", map[string]any{"id": bJob}), "beta's job is not the launch profile's")
	list := d.ok("cron.list", map[string]any{"profile": "beta"})
	require.Len(t, list["jobs"], 1)
	require.Empty(t, d.ok("cron.list", map[string]any{})["jobs"], "cron.list shows one profile's jobs")
	d.close()

	out, stderr, code := w.run("cron", "create", "--name", "a-job", "--prompt", "cron-canary-alpha: run the probe", "--every", "2h")
	require.Equal(t, 0, code, stderr)
	aJob := strings.TrimSpace(out)
	_, stderr, code = w.run("cron", "trigger", aJob)
	require.Equal(t, 0, code, stderr)
	_, stderr, code = w.run("cron", "create", "--profile", "gamma", "--name", "g-job", "--prompt", "cron-canary-gamma", "--every", "1h")
	require.Equal(t, 0, code, stderr)
	_, stderr, code = w.run("cron", "trigger", "--profile", "gamma", "no-such-job")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "unknown cron job")

	out, stderr, code = w.run("cron", "tick")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, stderr)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)

	for _, tc := range []struct {
		tn     *tenant
		job    string
		prompt string
	}{{alpha, aJob, "cron-canary-alpha"}, {beta, bJob, "cron-canary-beta"}} {
		recs := tc.tn.srv.RequestsOf(fakellm.KindMain)
		require.Len(t, recs, 2, tc.tn.name)
		require.Contains(t, string(recs[0].RawBody), tc.prompt)
		require.Equal(t, tc.tn.key, recs[0].Auth)
		env, cwd, _ := snapshot(t, toolResults(tc.tn.srv)[0])
		require.Equal(t, tc.tn.workdir, cwd)
		require.Equal(t, tc.tn.marker, env["ENV_MARKER"])
		files, err := filepath.Glob(filepath.Join(tc.tn.home, "cron", "output", tc.job, "*.md"))
		require.NoError(t, err)
		require.Len(t, files, 1, tc.tn.name)
		body, err := os.ReadFile(files[0])
		require.NoError(t, err)
		require.Contains(t, string(body), "probe done for "+tc.tn.name)
	}
	require.Empty(t, gamma.srv.Requests(), "a job not due does not fire")
	require.NotContains(t, string(mustRead(t, filepath.Join(alpha.home, "cron", "jobs.json"))), "cron-canary-beta")

	out, _, code = w.run("cron", "tick")
	require.Equal(t, 0, code)
	require.Empty(t, strings.TrimSpace(out), "fired jobs are not due again")
}

// A tick reads each profile's jobs file, and opens a profile's scope (its
// state database among it) only when there is one: a pooled server's tick
// over many tenants does not open every tenant's database.
func TestCronTickOpensOnlyProfilesWithJobs(t *testing.T) {
	t.Parallel()
	w, alpha, beta := alphaBetaWorld(t)
	out, stderr, code := w.run("cron", "create", "--name", "a-job", "--prompt", "cron-canary-alpha: run the probe", "--every", "2h")
	require.Equal(t, 0, code, stderr)
	_, stderr, code = w.run("cron", "trigger", strings.TrimSpace(out))
	require.Equal(t, 0, code, stderr)
	require.NoFileExists(t, filepath.Join(beta.home, "state.db"), "nothing has opened beta's scope yet")

	out, stderr, code = w.run("cron", "tick")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, stderr)
	require.Len(t, alpha.srv.RequestsOf(fakellm.KindMain), 2, "alpha's due job ran in the tick")
	require.FileExists(t, filepath.Join(alpha.home, "state.db"), "the tick opened the scope of a profile with a job")
	require.NoFileExists(t, filepath.Join(beta.home, "state.db"), "the tick opened the scope of a profile without jobs")
	require.Empty(t, beta.srv.Requests())
}

// storedMessages are the messages home's state.db holds of the stored
// session that session.create's result res names.
func storedMessages(t *testing.T, home string, res map[string]any) []store.Message {
	t.Helper()
	db, err := store.Open(context.Background(), filepath.Join(home, "state.db"))
	require.NoError(t, err)
	defer db.Close()
	msgs, err := db.Messages(context.Background(), res["stored_session_id"].(string))
	require.NoError(t, err)
	return msgs
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

func TestBadFramesAndErrorsKeepServing(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.addTenant("alpha", true)
	d := w.startTUI()

	d.send(`{"jsonrpc":"2.0","id":1,"method":`)
	bad := d.waitFor("parse error", func(m map[string]any) bool { return m["error"] != nil && m["id"] == nil })
	require.Equal(t, -32700.0, bad["error"].(map[string]any)["code"])

	require.Equal(t, -32601, d.errCode("no.such.method", map[string]any{}))
	require.Equal(t, 4064, d.errCode("session.create", map[string]any{"profile": "ghost"}))
	require.Equal(t, -32602, d.errCode("session.create", map[string]any{"profile": 5}))
	require.Equal(t, -32602, d.errCode("session.create", map[string]any{"unknown_field": true}))
	require.Equal(t, 4064, d.errCode("session.create", map[string]any{"profile": "../escape"}))
	require.Equal(t, 4044, d.errCode("prompt.submit", map[string]any{"session_id": "s-missing", "text": "x"}))
	require.Equal(t, -32602, d.errCode("prompt.submit", map[string]any{"session_id": ""}))
	require.Equal(t, -32602, d.errCode("config.set", map[string]any{"key": "shell", "value": "x"}))
	require.Equal(t, -32602, d.errCode("config.set", map[string]any{"key": "cwd", "value": "relative/path"}))
	require.Equal(t, 4064, d.errCode("config.set", map[string]any{"key": "prompt", "value": "x", "profile": "ghost"}))
	require.Equal(t, -32602, d.errCode("model.save_key", map[string]any{"slug": "no spaces", "api_key": "k"}))
	require.Equal(t, -32602, d.errCode("profiles.create", map[string]any{"name": "Bad Name"}))
	require.Equal(t, 4064, d.errCode("profiles.delete", map[string]any{"name": "ghost"}))
	require.Equal(t, -32602, d.errCode("profiles.delete", map[string]any{"name": "default"}))

	// Still serving: a full turn works after all of that.
	sid, _ := d.create("")
	require.Equal(t, "complete", d.turn(sid, "probe")["status"])
	require.Equal(t, 4090, d.errCode("profiles.create", map[string]any{"name": "default"}))
	for _, line := range d.raw {
		require.True(t, strings.HasPrefix(line, "{"), "stdout carries frames only: %q", line)
	}
	d.close()
}

func TestSettingsWritesTouchOnlyTheAddressedProfile(t *testing.T) {
	t.Parallel()
	w, alpha, beta := alphaBetaWorld(t)
	d := w.startTUI()
	sb, _ := d.create("beta")
	d.turn(sb, "probe")

	alphaFiles := map[string][]byte{}
	for _, f := range []string{"config.yaml", ".env"} {
		alphaFiles[f] = mustRead(t, filepath.Join(alpha.home, f))
	}
	newCwd := filepath.Join(filepath.Dir(beta.workdir), "beta-new-cwd") // beneath its workdir root
	require.NoError(t, os.Mkdir(newCwd, 0o700))
	d.ok("config.set", map[string]any{"key": "cwd", "value": newCwd, "session_id": sb})
	d.ok("config.set", map[string]any{"key": "model", "value": "model-beta-next", "profile": "beta"})
	res := d.ok("model.save_key", map[string]any{"slug": "extra", "api_key": "saved-key-beta", "session_id": sb})
	require.Equal(t, "EXTRA_API_KEY", res["env"])
	require.NotContains(t, res, "api_key")

	for f, before := range alphaFiles {
		require.Equal(t, string(before), string(mustRead(t, filepath.Join(alpha.home, f))), "alpha's %s is untouched", f)
	}
	require.Contains(t, string(mustRead(t, filepath.Join(beta.home, "config.yaml"))), newCwd)
	require.Contains(t, string(mustRead(t, filepath.Join(beta.home, ".env"))), "EXTRA_API_KEY=saved-key-beta")

	// The next turn of beta sees all three. The new workdir lies outside
	// the sandbox its shell ran in, so the shell restarted in a new one,
	// and says so.
	d.turn(sb, "probe again")
	results := toolResults(beta.srv)
	env, cwd, _ := snapshot(t, results[len(results)-1])
	require.Equal(t, newCwd, cwd)
	require.Equal(t, "saved-key-beta", env["EXTRA_API_KEY"])
	require.Contains(t, results[len(results)-1], "[shell restarted: its sandbox changed")
	require.NotContains(t, env, "TENANT_SHELL_STATE")
	recs := beta.srv.RequestsOf(fakellm.KindMain)
	require.Equal(t, "model-beta-next", recs[len(recs)-1].Model())

	// A profile created over RPC gets nothing of anyone.
	res = d.ok("profiles.create", map[string]any{"name": "fresh"})
	path := res["path"].(string)
	require.Equal(t, filepath.Join(w.launch, "profiles", "fresh"), path)
	for _, f := range []string{"config.yaml", ".env", "SOUL.md"} {
		require.Empty(t, mustRead(t, filepath.Join(path, f)))
	}
	d.ok("profiles.delete", map[string]any{"name": "beta"})
	require.Equal(t, 4064, d.errCode("session.create", map[string]any{"profile": "beta"}))
	require.Equal(t, 4044, d.errCode("prompt.submit", map[string]any{"session_id": sb, "text": "x"}), "a deleted profile's sessions end")
	d.close()
}

func TestNoProcessLeftBehind(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	tn := w.addTenant("alpha", true)
	// The tool call leaves a background sleeper in a process group of its
	// own, and one in a session of its own.
	srv := toolThenText(t, tn.key, "left one behind", func(any) (string, any) {
		return "terminal", map[string]string{"command": "set -m; sleep 300 & set +m; setsid sleep 300 & echo started"}
	})
	writeFile(t, filepath.Join(tn.home, "config.yaml"), "model:\n  base_url: "+srv.BaseURL+"\n  default: m\n  key_env: TENANT_PROVIDER_KEY\nterminal:\n  cwd: "+tn.workdir+"\n")
	d := w.startTUI()
	sid, _ := d.create("")
	d.turn(sid, "go")
	require.Contains(t, toolResults(srv)[0], "started")
	var procs []int
	require.Eventually(t, func() bool { procs = tenantProcs(tn); return len(procs) >= 3 }, 20*time.Second, 10*time.Millisecond,
		"positive control: the shell and both sleepers run while agentd does")
	d.close()
	require.Eventually(t, func() bool { return len(tenantProcs(tn)) == 0 }, 10*time.Second, 10*time.Millisecond,
		"processes %v survived agentd's exit", procs)
}

// childOf returns a child of ppid running the named command, or 0.
func childOf(ppid int, name string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(stat)
		open, closeIdx := strings.IndexByte(s, '('), strings.LastIndex(s, ") ")
		if open < 0 || closeIdx < 0 {
			continue
		}
		var state byte
		var pp int
		fmt.Sscanf(s[closeIdx+2:], "%c %d", &state, &pp)
		if pp == ppid && s[open+1:closeIdx] == name && state != 'Z' {
			return pid
		}
	}
	return 0
}

func sessionMembers(sid int) []int { return procgroup.SessionMembers(sid) }

func TestSIGTERMCancelsTurnAndReapsShell(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	tn := w.addTenant("alpha", true)
	// A provider whose tool call leaves a background sleeper in a group of
	// its own and then blocks.
	srv, err := fakellm.New(fakellm.Options{Keys: []string{tn.key}, Responder: func(r fakellm.Record) fakellm.Response {
		return fakellm.ToolCall("terminal", map[string]string{"command": "set -m; sleep 300 & echo BG=$!; set +m; echo SH=$$; sleep 300"})
	}})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	writeFile(t, filepath.Join(tn.home, "config.yaml"), "model:\n  base_url: "+srv.BaseURL+"\n  default: m\n  key_env: TENANT_PROVIDER_KEY\nterminal:\n  cwd: "+tn.workdir+"\n")
	d := w.startTUI("AGENTD_SHUTDOWN_GRACE=200ms")
	sid, _ := d.create("")
	d.submit(sid, "go")
	start := d.waitFor("tool.start", func(m map[string]any) bool { return eventType(m) == "tool.start" })
	require.NotNil(t, start)
	// The shell and its two sleepers, found by the tenant's marker.
	var members []int
	require.Eventually(t, func() bool {
		members = tenantProcs(tn)
		return len(members) >= 3
	}, 20*time.Second, 10*time.Millisecond, "the shell and its two sleepers")
	require.NoError(t, syscall.Kill(d.pid, syscall.SIGTERM))
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("agentd did not exit after SIGTERM")
	}
	require.NoError(t, d.waitErr, "SIGTERM is a clean exit; stderr:\n%s", d.stderr.String())
	require.Eventually(t, func() bool { return len(tenantProcs(tn)) == 0 }, 10*time.Second, 10*time.Millisecond, "processes %v survived", members)
	done := d.waitComplete(sid, 1)
	require.Equal(t, "error", done["status"], "the cancelled turn ends with an error event")
}
