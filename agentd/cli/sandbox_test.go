package cli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

// cmdTenant points tn at a provider whose model runs the user's text as a
// terminal command, then answers; extra is appended to its config.yaml.
func cmdTenant(t *testing.T, tn *tenant, extra string) *fakellm.Server {
	t.Helper()
	srv := toolThenText(t, tn.key, "ran", func(prompt any) (string, any) {
		return "terminal", map[string]string{"command": fmt.Sprint(prompt)}
	})
	writeFile(t, filepath.Join(tn.home, "config.yaml"), fmt.Sprintf(
		"model:\n  base_url: %s\n  default: m\n  key_env: TENANT_PROVIDER_KEY\nterminal:\n  cwd: %s\n%s", srv.BaseURL, tn.workdir, extra))
	tn.srv = srv
	return srv
}

// ranIn runs command as one turn of session sid and returns the tool result.
func ranIn(t *testing.T, a *agentd, tn *tenant, sid, command string) string {
	t.Helper()
	a.turn(sid, command)
	results := toolResults(tn.srv)
	require.NotEmpty(t, results)
	return results[len(results)-1]
}

func needSandbox(t *testing.T) {
	t.Helper()
	if _, err := sandbox.Effective(sandbox.Auto); err != nil {
		t.Skipf("no tool sandbox works here: %v", err)
	}
}

// hostile is what a hostile tenant's model asks its terminal.
const hostile = "cat $HOME/../../.env; cat $HOME/../*/.env; cat $HOME/../../SOUL.md; tr '\\0' '\\n' < /proc/*/environ; " +
	"echo beta-was-here >> $HOME/../../SOUL.md; true"

// TestPooledTerminalIsSandboxed: in pooled serve, beta's terminal reaches
// none of alpha's (the launch profile's) files or processes; with the
// no-tool-sandbox fault it reads them all (the positive control).
func TestPooledTerminalIsSandboxed(t *testing.T) {
	t.Parallel()
	needSandbox(t)
	for _, tc := range []struct{ mode, fault string }{{"auto", ""}, {"landlock", ""}, {"auto", "no-tool-sandbox"}} {
		fault := tc.fault
		t.Run("mode="+tc.mode+",fault="+fault, func(t *testing.T) {
			t.Parallel()
			if tc.mode != "auto" {
				if err := sandbox.Available(sandbox.Mode(tc.mode)); err != nil {
					t.Skipf("%s cannot run here: %v", tc.mode, err)
				}
			}
			w, alpha, beta := alphaBetaWorld(t)
			cmdTenant(t, beta, "")
			w.writeManaged("terminal:\n  sandbox: " + tc.mode + "\n")
			var env []string
			if fault != "" {
				env = []string{"AGENTD_FAULTS=" + fault, "AGENTD_ALLOW_FAULTS=1"}
			}
			s := w.startServe(nil, env...)
			ca, cb := s.dial(), s.dial()
			sa, _ := ca.create("")
			ca.turn(sa, "probe") // alpha's shell runs, its key in its environment
			sb, _ := cb.create("beta")
			out := ranIn(t, cb, beta, sb, hostile)
			soul := string(mustRead(t, filepath.Join(alpha.home, "SOUL.md")))
			if fault != "" {
				require.Contains(t, out, alpha.key, "positive control: unconfined, beta reads the launch .env")
				require.Contains(t, out, alpha.soul)
				require.Contains(t, soul, "beta-was-here", "positive control: unconfined, beta writes alpha's SOUL.md")
			} else {
				for _, c := range []string{alpha.key, alpha.marker, alpha.soul, "sk-agentd-process-secret"} {
					require.NotContains(t, out, c, "beta's sandboxed terminal shows alpha's or the server's data")
				}
				require.NotContains(t, soul, "beta-was-here", "beta wrote into alpha's home")
			}
			s.stop()
		})
	}
}

// TestPooledTerminalContainment: what a terminal starts with setsid, nohup
// or a double fork ends with session close, profile delete and the
// server's stop; with the escaped-process fault a setsid child survives
// the stop (the positive control).
func TestPooledTerminalContainment(t *testing.T) {
	t.Parallel()
	needSandbox(t)
	const leave = "setsid sleep 600 & (sleep 600 &); nohup sleep 600 >/dev/null 2>&1 & echo started"
	for _, how := range []string{"session.close", "profiles.delete", "stop", "stop under landlock", "stop with escaped-process"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			w, _, beta := alphaBetaWorld(t)
			cmdTenant(t, beta, "")
			if strings.Contains(how, "landlock") {
				if err := sandbox.Available(sandbox.Landlock); err != nil {
					t.Skipf("landlock cannot run here: %v", err)
				}
				w.writeManaged("terminal:\n  sandbox: landlock\n")
			}
			// agentd makes a Landlock shell's private tmp in its TMPDIR:
			// without containment (the escaped-process fault) nothing
			// removes it.
			env := []string{"TMPDIR=" + t.TempDir()}
			if strings.Contains(how, "escaped-process") {
				env = append(env, "AGENTD_FAULTS=escaped-process", "AGENTD_ALLOW_FAULTS=1")
			}
			t.Cleanup(func() {
				for _, pid := range tenantProcs(beta) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			s := w.startServe(nil, env...)
			cb := s.dial()
			sb, _ := cb.create("beta")
			require.Contains(t, ranIn(t, cb, beta, sb, leave), "started")
			require.Eventually(t, func() bool { return len(tenantProcs(beta)) >= 4 }, 20*time.Second, 10*time.Millisecond,
				"positive control: beta's shell and its three sleepers run")
			// The setsid sleeper is forked in the shell's session and leaves
			// it when its setsid runs: the event comes once it is sleep in a
			// session of its own, or a session kill could end it first.
			require.Eventually(t, func() bool { return setsidSleeper(tenantProcs(beta)) }, 20*time.Second, 10*time.Millisecond,
				"positive control: beta's setsid sleeper leads a session of its own")
			switch how {
			case "session.close":
				cb.ok("session.close", map[string]any{"session_id": sb})
			case "profiles.delete":
				cb.ok("profiles.delete", map[string]any{"name": "beta"})
			default: // stop
				s.stop()
			}
			if strings.Contains(how, "escaped-process") {
				require.NotEmpty(t, tenantProcs(beta), "without containment a setsid child outlives the server")
				return
			}
			require.Eventually(t, func() bool { return len(tenantProcs(beta)) == 0 }, 10*time.Second, 10*time.Millisecond,
				"a process of beta's terminal survived %s", how)
			if !strings.HasPrefix(how, "stop") {
				s.stop()
			}
		})
	}
}

// TestPooledServeRefusesAnUnsandboxedTerminal: a profile's own
// terminal.sandbox: none is ignored in pooled serving, with a log line
// naming the profile, file and key: its terminal runs in the sandbox auto
// resolves to (where none works, a named profile's terminal is refused
// with the reason). The operator's none is obeyed; a bad operator value is
// an error naming the file and key.
func TestPooledServeRefusesAnUnsandboxedTerminal(t *testing.T) {
	t.Parallel()
	w, alpha, beta := alphaBetaWorld(t)
	cmdTenant(t, alpha, "  sandbox: none\n")
	cmdTenant(t, beta, "  sandbox: none\n")
	s, ca, cb, sa, sb := w.serveAlphaBeta()

	peek := "echo ran-beta; cat " + filepath.Join(alpha.home, ".env")
	out := ranIn(t, cb, beta, sb, peek)
	require.NotContains(t, out, alpha.key, "beta's own terminal.sandbox: none was obeyed")
	if _, err := sandbox.Effective(sandbox.Auto); err == nil {
		require.Contains(t, out, "ran-beta", "beta's terminal runs, in the sandbox auto picks")
		require.Contains(t, ranIn(t, ca, alpha, sa, "echo ran-alpha; cat "+filepath.Join(beta.home, ".env")), "ran-alpha")
		require.NotContains(t, toolResults(alpha.srv)[0], beta.key, "the launch profile's own none was ignored too")
	} else {
		require.NotContains(t, out, "ran-beta")
		require.Contains(t, out, `terminal refused for profile "beta"`)
		require.Contains(t, out, filepath.Join(w.managed, "config.yaml"), "the error says where the operator can allow it")
	}
	for _, tn := range []*tenant{alpha, beta} {
		require.Contains(t, s.stderr.String(), "file="+filepath.Join(tn.home, "config.yaml")+" key=terminal.sandbox",
			"the log names the profile, file and key")
	}

	w.writeManaged("terminal:\n  sandbox: none\n")
	out = ranIn(t, cb, beta, sb, peek)
	require.Contains(t, out, "ran-beta", "the operator allowed it")
	require.Contains(t, out, alpha.key, "positive control: unconfined, the terminal reads another home")

	w.writeManaged("terminal:\n  sandbox: jail\n")
	sb2, _ := cb.create("beta")
	out = ranIn(t, cb, beta, sb2, "echo ran-beta")
	require.NotContains(t, out, "ran-beta")
	require.Contains(t, out, filepath.Join(w.managed, "config.yaml"))
	require.Contains(t, out, `terminal.sandbox: bad sandbox mode "jail"`)
	s.stop()
}

func TestSandboxCheckCommand(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	out, _, code := w.run("sandbox", "check")
	require.Contains(t, out, "bwrap")
	require.Contains(t, out, "landlock")
	require.Contains(t, out, "auto     -> ")
	if _, err := sandbox.Effective(sandbox.Auto); err == nil {
		require.Equal(t, 0, code, out)
		require.Contains(t, out, "the launch profile: terminal.network is none (the default)")
		w.writeManaged("terminal:\n  network: host\n")
		out, _, code = w.run("sandbox", "check")
		require.Equal(t, 0, code, out)
		require.Contains(t, out, "terminal.network is host (pinned by the operator in "+filepath.Join(w.managed, "config.yaml")+")")
	} else {
		require.Equal(t, 1, code, out)
	}
	require.Contains(t, out, "the launch profile: terminal.sandbox is auto (the default)")
	_, errOut, code := w.run("sandbox", "nope")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "usage: agentd sandbox check")
}

// TestSandboxCheckJudgesTheConfiguredMode: the check judges what the
// operator pinned, not only what works: bwrap pinned where bubblewrap
// cannot be found fails (exit 1, naming the pin and the reason), none
// pinned by the operator passes (the operator allowed it), none chosen by
// a profile itself fails.
func TestSandboxCheckJudgesTheConfiguredMode(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	managed := filepath.Join(w.managed, "config.yaml")
	noBwrap := t.TempDir() // a PATH with no bwrap on it
	writeFile(t, managed, "terminal:\n  sandbox: bwrap\n")
	w.extraEnv = []string{"PATH=" + noBwrap}
	out, _, code := w.run("sandbox", "check")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "terminal.sandbox is bwrap (pinned by the operator in "+managed+") and it cannot run here")
	require.Contains(t, out, "bubblewrap is not installed")

	writeFile(t, managed, "terminal:\n  sandbox: none\n")
	out, _, code = w.run("sandbox", "check")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "as the operator allowed")

	require.NoError(t, os.Remove(managed))
	require.NoError(t, os.MkdirAll(filepath.Join(w.launch, "profiles", "beta"), 0o700))
	// A profile's own terminal.sandbox is ignored: only the operator may set it.
	writeFile(t, filepath.Join(w.launch, "profiles", "beta", "config.yaml"), "terminal:\n  sandbox: none\n")
	out, _, _ = w.run("sandbox", "check", "--profile", "beta")
	require.Contains(t, out, `profile "beta": `+filepath.Join(w.launch, "profiles", "beta", "config.yaml")+
		" sets terminal.sandbox, which only the operator's managed scope may set: ignored")
	require.Contains(t, out, "profile beta: terminal.sandbox is auto (the default)")

	_, errOut, code := w.run("sandbox", "check", "--profile", "nosuch")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "nosuch")
}

// TestPluginHostUnderLandlock: with terminal.sandbox: landlock the default
// launcher runs the plugin host through the Landlock launcher: the plugin
// runs as its profile, in its home, and nothing of it outlives the server.
func TestPluginHostUnderLandlock(t *testing.T) {
	t.Parallel()
	if err := sandbox.Available(sandbox.Landlock); err != nil {
		t.Skipf("landlock cannot run here: %v", err)
	}
	w := newWorld(t)
	alpha := w.addTenant("alpha", true)
	srv := pluginTenant(t, alpha, "host")
	w.writeManaged("terminal:\n  sandbox: landlock\n")
	s := w.startServe(nil)
	ca := s.dial()
	sa, _ := ca.create("")
	require.Equal(t, "complete", ca.turn(sa, "probe")["status"])
	p := probeOf(t, srv)
	require.NotEqual(t, s.pid, p.Pid, "the plugin ran out of the server")
	require.Equal(t, alpha.home, p.Wd)
	require.Equal(t, alpha.marker, p.Marker)
	require.Equal(t, "NESTED-"+alpha.marker+"\n"+alpha.workdir+"\n", p.Nested)
	log := string(mustRead(t, filepath.Join(alpha.home, "logs", "agent.log")))
	require.Contains(t, log, "launcher=landlock")
	require.NotEmpty(t, tenantProcs(alpha), "positive control: alpha's plugin host runs")
	s.stop()
	require.Eventually(t, func() bool { return len(tenantProcs(alpha)) == 0 }, 10*time.Second, 10*time.Millisecond,
		"alpha's plugin host outlived the server")
}

// setsidSleeper reports whether one of pids is a sleep that leads its own
// session.
func setsidSleeper(pids []int) bool {
	for _, pid := range pids {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || strings.TrimSpace(string(comm)) != "sleep" {
			continue
		}
		if sid, ok := procgroup.SessionOf(pid); ok && sid == pid {
			return true
		}
	}
	return false
}

// TestLaunchShellReadsItsOwnFilesWrittenAnew: the server writes the launch
// profile's config.yaml and .env anew (config.set, model.save_key) while
// its shell runs. Under Landlock the launch home is granted entry by entry,
// each as the file it was when the shell started, so the shell starts
// again on its next turn, says why, and reads the new files. Under
// bubblewrap the home is bound whole: the shell keeps running, state and
// all.
func TestLaunchShellReadsItsOwnFilesWrittenAnew(t *testing.T) {
	t.Parallel()
	for _, mode := range []sandbox.Mode{sandbox.Landlock, sandbox.Bwrap} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			if err := sandbox.Available(mode); err != nil {
				t.Skipf("%s cannot run here: %v", mode, err)
			}
			w, alpha, _ := alphaBetaWorld(t)
			cmdTenant(t, alpha, "")
			w.writeManaged("terminal:\n  sandbox: " + string(mode) + "\n")
			s := w.startServe(nil, "TMPDIR="+t.TempDir())
			c := s.dial()
			sid, _ := c.create("")
			read := "cat " + filepath.Join(alpha.home, "config.yaml") + " " + filepath.Join(alpha.home, ".env")
			first := ranIn(t, c, alpha, sid, "export KEPT=yes; echo shellpid=$$; "+read)
			require.Contains(t, first, "key_env", "the shell reads its config.yaml")
			require.NotContains(t, first, "Permission denied")

			c.ok("config.set", map[string]any{"key": "prompt", "value": "prompt-alpha-next", "session_id": sid})
			c.ok("model.save_key", map[string]any{"slug": "extra", "api_key": "saved-key-alpha", "session_id": sid})
			again := ranIn(t, c, alpha, sid, read+"; echo kept=$KEPT; echo shellpid=$$")
			require.NotContains(t, again, "Permission denied")
			require.Contains(t, again, "prompt-alpha-next", "the shell reads the config.yaml config.set wrote")
			require.Contains(t, again, "EXTRA_API_KEY=saved-key-alpha", "the shell reads the .env model.save_key wrote")
			if mode != sandbox.Landlock {
				require.NotContains(t, again, "[shell restarted")
				require.Contains(t, again, "kept=yes", "the same shell")
				s.stop()
				return
			}
			require.Contains(t, again, "[shell restarted: ")
			require.Contains(t, again, "kept=\n", "a new shell")
			// Landlock has no PID namespace: $$ is the shell's own pid. The
			// shell the restart replaced is gone, and the new one goes with
			// the server.
			pids := shellPid.FindAllStringSubmatch(first+again, -1)
			require.Len(t, pids, 2, "both shells said their pid")
			old, _ := strconv.Atoi(pids[0][1])
			next, _ := strconv.Atoi(pids[1][1])
			require.NotEqual(t, old, next)
			require.True(t, procgroup.Alive(next), "the live shell's pid %d is a pid of this machine", next)
			require.Eventually(t, func() bool { return !procgroup.Alive(old) }, 10*time.Second, 10*time.Millisecond, "the replaced shell %d survived", old)
			s.stop()
			require.Eventually(t, func() bool { return !procgroup.Alive(next) }, 10*time.Second, 10*time.Millisecond, "the shell %d survived the server", next)
		})
	}
}

// shellPid is what a command that echoes shellpid=$$ printed.
var shellPid = regexp.MustCompile(`shellpid=(\d+)`)
