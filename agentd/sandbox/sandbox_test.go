package sandbox_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
	"github.com/tenantcanary/tenantcanary/agentd/sandbox/sandboxtest"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

// TestMain lets the test binary be the launcher: `<test> sandbox-exec ...`.
func TestMain(m *testing.M) { sandboxtest.Main(m) }

func token(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// need skips the test with the reason when mode m cannot run here.
func need(t testing.TB, m sandbox.Mode) {
	t.Helper()
	if err := sandbox.Available(m); err != nil {
		t.Skipf("mode %s cannot run here: %v", m, err)
	}
}

// forEachMode runs fn as a parallel sub-test per mode, skipping a
// sandboxing mode this machine cannot run.
func forEachMode(t *testing.T, modes []sandbox.Mode, fn func(t *testing.T, mode sandbox.Mode)) {
	t.Helper()
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			if mode != sandbox.None {
				need(t, mode)
			}
			fn(t, mode)
		})
	}
}

// world is a launch home with two named profiles, each holding a canary
// in its .env, and a folder outside every home.
type world struct {
	root, launch, alpha, beta, outside string
	canary                             map[string]string // home -> its canary
}

func newWorld(t *testing.T) *world {
	root := t.TempDir()
	w := &world{root: root, launch: filepath.Join(root, "launch"), outside: filepath.Join(root, "outside"), canary: map[string]string{}}
	w.alpha = filepath.Join(w.launch, "profiles", "alpha")
	w.beta = filepath.Join(w.launch, "profiles", "beta")
	for _, h := range []string{w.launch, w.alpha, w.beta, w.outside} {
		require.NoError(t, os.MkdirAll(h, 0o700))
		c := "canary-" + filepath.Base(h) + "-" + token(t)
		w.canary[h] = c
		require.NoError(t, os.WriteFile(filepath.Join(h, ".env"), []byte("KEY="+c+"\n"), 0o600))
	}
	return w
}

// run runs script under p with env and returns its combined output.
func run(t *testing.T, p sandbox.Policy, env []string, script string) string {
	t.Helper()
	c, err := p.Command([]string{"bash", "-c", script}, env)
	require.NoError(t, err)
	return startAndWait(t, c)
}

func baseEnv(home string) []string {
	return []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home}
}

// TestConfinement: inside the sandbox a shell reads and writes its own
// home, workdir and /tmp, and nothing of a sibling home, the launch home,
// another process's environment or anywhere else; the same script with
// mode none (the positive control) does reach all of them.
func TestConfinement(t *testing.T) {
	t.Parallel()
	forEachMode(t, []sandbox.Mode{sandbox.Bwrap, sandbox.Landlock, sandbox.None}, func(t *testing.T, mode sandbox.Mode) {
		w := newWorld(t)
		// A process outside the sandbox with a canary in its environment.
		procCanary := "proc-canary-" + token(t)
		other := exec.Command("sleep", "600")
		other.Env = []string{"OTHER=" + procCanary}
		procgroup.Prepare(other)
		require.NoError(t, other.Start())
		t.Cleanup(func() { _ = procgroup.Kill(other.Process.Pid); _ = other.Wait() })

		mark := "write-" + token(t)
		script := strings.Join([]string{
			"cat .env",
			"cat $HOME/../beta/.env",
			"cat $HOME/../../.env",
			"cat " + w.outside + "/.env",
			"cat $HOME/../*/.env",
			fmt.Sprintf("tr '\\0' '\\n' < /proc/%d/environ", other.Process.Pid),
			fmt.Sprintf("tr '\\0' '\\n' < /proc/%d/environ", os.Getpid()),
			"echo " + mark + " > $HOME/../beta/pwned",
			"echo " + mark + " > " + w.outside + "/pwned",
			"echo " + mark + " > own-file && cat own-file",
			"echo " + mark + " > ${TMPDIR:-/tmp}/tmp-file && cat ${TMPDIR:-/tmp}/tmp-file",
			"echo cwd=$(pwd)",
		}, " 2>&1; ") + " 2>&1; true"
		// Unconfined, a write to $TMPDIR lands in the real one: the test's.
		env := append(baseEnv(w.alpha), "PROBE_ENV=probe-"+mark, "TMPDIR="+t.TempDir())
		out := run(t, sandbox.Policy{Mode: mode, Home: w.alpha, Dir: w.alpha, Self: sandboxtest.Self(t)}, env, script)

		// What the tenant may see, in every mode.
		require.Contains(t, out, w.canary[w.alpha], "its own .env")
		require.Equal(t, 2, strings.Count(out, mark), "own file and tmp written and read back:\n%s", out)
		require.Contains(t, out, "cwd="+w.alpha)

		foreign := []string{w.canary[w.beta], w.canary[w.launch], w.canary[w.outside], procCanary}
		landed := func(path string) bool { _, err := os.Stat(path); return err == nil }
		if mode == sandbox.None {
			for _, c := range foreign {
				require.Contains(t, out, c, "positive control: without a sandbox the script reads it")
			}
			require.True(t, landed(filepath.Join(w.beta, "pwned")), "positive control: writes land in a sibling home")
			require.True(t, landed(filepath.Join(w.outside, "pwned")))
			return
		}
		for _, c := range foreign {
			require.NotContains(t, out, c, "a foreign canary read from inside the %s sandbox", mode)
		}
		require.False(t, landed(filepath.Join(w.beta, "pwned")), "a write into a sibling home")
		require.False(t, landed(filepath.Join(w.outside, "pwned")), "a write outside home and tmp")
		require.NotContains(t, out, "AGENTD_", "nothing of the test process's environment")
	})
}

// TestLaunchHomeHidesProfiles: the launch profile sees its own home but
// not the profiles folder beneath it.
func TestLaunchHomeHidesProfiles(t *testing.T) {
	t.Parallel()
	forEachMode(t, []sandbox.Mode{sandbox.Bwrap, sandbox.Landlock}, func(t *testing.T, mode sandbox.Mode) {
		w := newWorld(t)
		p := sandbox.Policy{Mode: mode, Home: w.launch, Hide: []string{filepath.Join(w.launch, "profiles")}, Dir: w.launch, Self: sandboxtest.Self(t)}
		out := run(t, p, baseEnv(w.launch), "cat .env; cat profiles/alpha/.env profiles/beta/.env; echo x > profiles/alpha/pwned; true")
		require.Contains(t, out, w.canary[w.launch])
		require.NotContains(t, out, w.canary[w.alpha])
		require.NotContains(t, out, w.canary[w.beta])
		_, err := os.Stat(filepath.Join(w.alpha, "pwned"))
		require.Error(t, err, "a write into a profile beneath the launch home")
	})
}

// TestHomeStampChangesWhenAGrantedEntryIsWrittenAnew: the launch home's
// stamp under Landlock names each top-level entry as the file it is, so a
// rename over one or a new entry changes it and an in-place write does
// not. A home granted whole has none.
func TestHomeStampChangesWhenAGrantedEntryIsWrittenAnew(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	for _, name := range []string{"config.yaml", ".env", "profiles/alpha/.env", "memories/MEMORY.md"} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(home, name)), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(home, name), []byte("v1"), 0o600))
	}
	launch := sandbox.Policy{Mode: sandbox.Landlock, Home: home, Hide: []string{filepath.Join(home, "profiles")}}
	first := launch.HomeStamp()
	require.Contains(t, first, "config.yaml ")
	require.Contains(t, first, "memories ")
	require.NotContains(t, first, "profiles", "the hidden folder is granted nothing")

	require.NoError(t, os.WriteFile(filepath.Join(home, "config.yaml"), []byte("v2, in place"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(home, "memories", "MEMORY.md"), []byte("v2"), 0o600))
	require.Equal(t, first, launch.HomeStamp(), "a write in place keeps every granted file")

	tmp := filepath.Join(home, "config.yaml.tmp")
	require.NoError(t, os.WriteFile(tmp, []byte("v3, anew"), 0o600))
	require.NoError(t, os.Rename(tmp, filepath.Join(home, "config.yaml")))
	renamed := launch.HomeStamp()
	require.NotEqual(t, first, renamed, "config.yaml is another file now")

	require.NoError(t, os.WriteFile(filepath.Join(home, "SOUL.md"), []byte("new"), 0o600))
	require.NotEqual(t, renamed, launch.HomeStamp(), "a new entry")

	for _, whole := range []sandbox.Policy{
		{Mode: sandbox.Bwrap, Home: home, Hide: launch.Hide},
		{Mode: sandbox.None, Home: home, Hide: launch.Hide},
		{Mode: sandbox.Landlock, Home: filepath.Join(home, "profiles", "alpha"), Hide: launch.Hide},
	} {
		require.Empty(t, whole.HomeStamp(), "%s, home %s: granted whole", whole.Mode, whole.Home)
	}
}

// startTree runs a script that leaves a setsid child, a double-forked
// orphan and a nohup child behind, all marked, and waits for "ready".
func startTree(t *testing.T, p sandbox.Policy, marker string) (*sandbox.Cmd, chan struct{}) {
	t.Helper()
	script := "setsid sleep 600 & (sleep 600 &) ; nohup sleep 600 >/dev/null 2>&1 & sleep 0.2; echo ready; sleep 600"
	env := append(baseEnv(p.Home), procgroup.MarkerVar+"="+marker)
	// Without containment (the escaped-process fault) the launcher execs
	// the command and nothing removes its private tmp.
	p.TmpRoot = t.TempDir()
	c, err := p.Command([]string{"bash", "-c", script}, env)
	require.NoError(t, err)
	out, err := c.StdoutPipe()
	require.NoError(t, err)
	procgroup.Prepare(c.Cmd)
	c.SysProcAttr.Setpgid, c.SysProcAttr.Setsid = false, true
	require.NoError(t, c.Start())
	c.Started()
	waited := make(chan struct{})
	t.Cleanup(func() {
		for _, pid := range procgroup.Marked(marker) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	go func() { _ = c.Wait(); close(waited) }()
	return c, waited
}

// liveTree starts startTree's tree under mode in a new home, marked with
// a new marker of prefix, and checks the tree is all there (before what
// the test does to it).
func liveTree(t *testing.T, mode sandbox.Mode, prefix, before string) (*sandbox.Cmd, chan struct{}, string) {
	t.Helper()
	home := t.TempDir()
	marker := prefix + "-" + token(t)
	c, waited := startTree(t, sandbox.Policy{Mode: mode, Home: home, Dir: home, Self: sandboxtest.Self(t)}, marker)
	// The command's four (bash, about to exec its last sleep, may be
	// between images): the launchers and bwrap carry none of its
	// variables (issue 46).
	require.GreaterOrEqual(t, len(procgroup.Marked(marker)), 3, "the tree is there before "+before)
	return c, waited, marker
}

// TestStopEndsTheWholeTree: Stop ends setsid, double-forked and nohup
// children; the escaped-process fault (no containment) leaves them.
func TestStopEndsTheWholeTree(t *testing.T) {
	t.Parallel()
	forEachMode(t, []sandbox.Mode{sandbox.Bwrap, sandbox.Landlock, sandbox.None}, func(t *testing.T, mode sandbox.Mode) {
		c, waited, marker := liveTree(t, mode, "tree", "Stop")
		c.Stop(waited)
		require.Empty(t, procgroup.Marked(marker), "no process of the tree survives Stop")
	})
	t.Run("escaped-process fault", func(t *testing.T) {
		t.Parallel()
		home := t.TempDir()
		marker := "tree-" + token(t)
		c, waited := startTree(t, sandbox.Policy{Mode: sandbox.Bwrap, Home: home, Dir: home, Self: sandboxtest.Self(t), NoContain: true}, marker)
		c.Stop(waited)
		require.NotEmpty(t, procgroup.Marked(marker), "without containment the setsid child outlives Stop")
	})
}

// TestCommandEndingEndsItsTree: when the command exits on its own, what it
// left behind goes with it.
func TestCommandEndingEndsItsTree(t *testing.T) {
	t.Parallel()
	forEachMode(t, []sandbox.Mode{sandbox.Bwrap, sandbox.Landlock, sandbox.None}, func(t *testing.T, mode sandbox.Mode) {
		home := t.TempDir()
		marker := "exit-" + token(t)
		env := append(baseEnv(home), procgroup.MarkerVar+"="+marker)
		c, err := sandbox.Policy{Mode: mode, Home: home, Dir: home, Self: sandboxtest.Self(t)}.Command(
			[]string{"bash", "-c", "setsid sleep 600 & (sleep 600 &); exit 3"}, env)
		require.NoError(t, err)
		procgroup.Prepare(c.Cmd)
		require.NoError(t, c.Start())
		c.Started()
		err = c.Wait()
		waited := make(chan struct{})
		close(waited)
		c.Stop(waited)
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		require.Equal(t, 3, ee.ExitCode(), "the command's status comes through")
		require.Empty(t, procgroup.Marked(marker), "nothing the command left behind survives it")
	})
}

// TestLaunchersHoldNoneOfTheCommandsStdio: once the command has its stdin
// and stdout, agentd's launchers (under Landlock, two of them between
// agentd and the command) hold neither. A command that closes both while
// it still runs (as a killed plugin host's are closed for it) leaves no
// reader of its stdin, so agentd's next write fails at once (a request
// never read, which it may send to the host's successor), and its stdout
// ends at once. Mode none's command runs under the subreaper launcher
// too. The command reads a line first: the write that gives it that line
// shows the pipe taking what is written while the command holds it.
func TestLaunchersHoldNoneOfTheCommandsStdio(t *testing.T) {
	t.Parallel()
	forEachMode(t, []sandbox.Mode{sandbox.None, sandbox.Landlock}, func(t *testing.T, mode sandbox.Mode) {
		home := t.TempDir()
		pol := sandbox.Policy{Mode: mode, Home: home, Dir: home, Allow: []string{home}, Self: sandboxtest.Self(t)}
		closed := filepath.Join(home, "closed")
		tree := "stdio-" + token(t)
		env := append(baseEnv(home), procgroup.MarkerVar+"="+tree)
		c, err := pol.Command([]string{"bash", "-c", "read -r line; exec 0<&- 1>&-; echo > " + closed + "; sleep 600"}, env)
		require.NoError(t, err)
		in, err := c.StdinPipe()
		require.NoError(t, err)
		out, err := c.StdoutPipe()
		require.NoError(t, err)
		procgroup.Prepare(c.Cmd)
		require.NoError(t, c.Start())
		c.Started()
		t.Cleanup(func() { // a failed check leaves the tree: end it
			for _, pid := range procgroup.Marked(tree) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		})
		_, err = in.Write([]byte("go\n"))
		require.NoError(t, err, "the command holds its stdin: the write is taken")

		// Each write fills no more than the pipe's buffer: a write that a
		// held pipe accepts keeps succeeding, and one with no reader fails.
		deadline := time.Now().Add(10 * time.Second)
		var werr error
		for time.Now().Before(deadline) {
			if _, err := os.Stat(closed); err == nil {
				if _, werr = in.Write([]byte("x")); werr != nil {
					break
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		require.True(t, errors.Is(werr, syscall.EPIPE), "a write to the stdin of a command that closed it still went somewhere (a launcher holds it): %v", werr)
		done := make(chan error, 1)
		go func() { _, err := io.ReadAll(out); done <- err }()
		select {
		case err := <-done:
			require.NoError(t, err, "stdout ends")
		case <-time.After(10 * time.Second):
			t.Fatal("the command closed its stdout, and it has not ended: a launcher holds it")
		}
		waited := make(chan struct{})
		go func() { _ = c.Wait(); close(waited) }()
		c.Stop(waited)
		require.Empty(t, procgroup.Marked(tree), "no process of the tree survives Stop")
	})
}

func TestParseMode(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]sandbox.Mode{"": sandbox.Auto, "auto": sandbox.Auto, " BWRAP ": sandbox.Bwrap, "landlock": sandbox.Landlock, "none": sandbox.None} {
		got, err := sandbox.ParseMode(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	_, err := sandbox.ParseMode("chroot")
	require.ErrorIs(t, err, sandbox.ErrBadMode)
	require.ErrorContains(t, err, `"chroot"`)
}

func TestCheckNamesEveryMode(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	code := sandbox.Check(&b, sandbox.Configured{})
	for _, m := range []string{"bwrap", "landlock", "auto", "the launch profile: terminal.sandbox is auto (the default)"} {
		require.Contains(t, b.String(), m)
	}
	if _, err := sandbox.Effective(sandbox.Auto); err == nil {
		require.Equal(t, 0, code, b.String())
	} else {
		require.Equal(t, 1, code, b.String())
	}
}

// TestResolve: auto resolves as Effective does; a named mode that cannot
// run is an error, never a silent downgrade; none is none, with why.
func TestResolve(t *testing.T) {
	t.Parallel()
	eff, why, err := sandbox.Resolve(sandbox.Auto)
	require.NoError(t, err)
	if want, werr := sandbox.Effective(sandbox.Auto); werr == nil {
		require.Equal(t, want, eff)
		require.Empty(t, why)
	} else {
		require.Equal(t, sandbox.None, eff)
		require.Contains(t, why, "no sandbox works here")
	}
	for _, m := range []sandbox.Mode{sandbox.Bwrap, sandbox.Landlock} {
		eff, _, err := sandbox.Resolve(m)
		if sandbox.Available(m) == nil {
			require.NoError(t, err)
			require.Equal(t, m, eff)
		} else {
			require.ErrorIs(t, err, sandbox.ErrUnavailable)
		}
	}
	eff, why, err = sandbox.Resolve(sandbox.None)
	require.NoError(t, err)
	require.Equal(t, sandbox.None, eff)
	require.Equal(t, "terminal.sandbox is none", why)

	var b bytes.Buffer
	require.Equal(t, 0, sandbox.Check(&b, sandbox.Configured{Mode: sandbox.None, Pinned: true, From: "/etc/agentd/config.yaml"}), b.String())
	require.Contains(t, b.String(), "as the operator allowed")
	b.Reset()
	require.Equal(t, 1, sandbox.Check(&b, sandbox.Configured{Profile: "beta", Mode: sandbox.None, From: "beta/config.yaml"}), b.String())
	require.Contains(t, b.String(), "profile beta: terminal.sandbox is none (set in beta/config.yaml) -> none")
}

// TestKilledLauncherStillEndsTheTree: a supervisor that SIGKILLs the
// launcher's session (as a plugin host's supervisor kills its group) still
// leaves nothing behind: the keeper, in a session of its own, gets its
// parent-death signal and ends the tree; bwrap's namespace dies with it.
func TestKilledLauncherStillEndsTheTree(t *testing.T) {
	t.Parallel()
	forEachMode(t, []sandbox.Mode{sandbox.Bwrap, sandbox.Landlock, sandbox.None}, func(t *testing.T, mode sandbox.Mode) {
		c, waited, marker := liveTree(t, mode, "killed", "the kill")
		procgroup.KillSession(c.Process.Pid)
		<-waited
		require.Eventually(t, func() bool { return len(procgroup.Marked(marker)) == 0 }, 20*time.Second, 10*time.Millisecond,
			"the tree outlived a SIGKILL of the launcher's session")
	})
}

// A Landlock command's private tmp is made under the policy's TmpRoot
// (agentd's own temp folder by default), not the command environment's
// TMPDIR, and is gone once the command is; without containment (the
// escaped-process fault) the launcher execs the command, so the folder
// stays, under TmpRoot.
func TestLandlockPrivateTmpIsUnderTmpRoot(t *testing.T) {
	t.Parallel()
	need(t, sandbox.Landlock)
	for _, contain := range []bool{true, false} {
		t.Run(fmt.Sprintf("contain=%v", contain), func(t *testing.T) {
			t.Parallel()
			home, root, elsewhere := t.TempDir(), t.TempDir(), t.TempDir()
			p := sandbox.Policy{Mode: sandbox.Landlock, Home: home, Dir: home, Self: sandboxtest.Self(t), TmpRoot: root, NoContain: !contain}
			c, err := p.Command([]string{"sh", "-c", `echo "$TMPDIR"; echo x > "$TMPDIR/f"`}, append(baseEnv(home), "TMPDIR="+elsewhere))
			require.NoError(t, err)
			out, err := c.Output()
			require.NoError(t, err)
			tmp := strings.TrimSpace(string(out))
			require.Equal(t, root, filepath.Dir(tmp), "the private tmp %s is not under TmpRoot", tmp)
			entries, err := os.ReadDir(elsewhere)
			require.NoError(t, err)
			require.Empty(t, entries, "the command environment's TMPDIR got the private tmp")
			if contain {
				_, err = os.Stat(tmp)
				require.ErrorIs(t, err, fs.ErrNotExist, "the private tmp outlived the command")
			}
		})
	}
}

// BenchmarkHomeStamp is what the launch profile's every tool call pays
// under Landlock to learn whether its shell must start again: a listing of
// the home's top level and an lstat an entry (a home of agentd's layout).
func BenchmarkHomeStamp(b *testing.B) {
	home := b.TempDir()
	for _, name := range []string{"config.yaml", ".env", "SOUL.md", "state.db", "state.db-wal", "jobs.json",
		"memories/MEMORY.md", "logs/agent.log", "skills/x", "plugins/p/plugin.yaml", "profiles/alpha/.env", "profiles/beta/.env"} {
		require.NoError(b, os.MkdirAll(filepath.Dir(filepath.Join(home, name)), 0o700))
		require.NoError(b, os.WriteFile(filepath.Join(home, name), []byte("x"), 0o600))
	}
	p := sandbox.Policy{Mode: sandbox.Landlock, Home: home, Hide: []string{filepath.Join(home, "profiles")}}
	for b.Loop() {
		if p.HomeStamp() == "" {
			b.Fatal("no stamp")
		}
	}
}
