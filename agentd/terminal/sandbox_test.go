package terminal

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
	"github.com/tenantcanary/tenantcanary/agentd/sandbox/sandboxtest"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

func tok() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sandboxed is a shell in mode m for a home of its own beside a sibling
// home with a canary, with marker in its environment.
type sandboxed struct {
	sh                  *Shell
	home, sibling       string
	siblingCanary, mark string
}

func newSandboxed(t *testing.T, m sandbox.Mode, mutate func(*sandbox.Policy)) *sandboxed {
	t.Helper()
	if m != sandbox.None {
		if err := sandbox.Available(m); err != nil {
			t.Skipf("mode %s cannot run here: %v", m, err)
		}
	}
	root := t.TempDir()
	s := &sandboxed{home: filepath.Join(root, "alpha"), sibling: filepath.Join(root, "beta"), siblingCanary: "sib-" + tok(), mark: "run-" + tok()}
	require.NoError(t, os.MkdirAll(filepath.Join(s.home, "work"), 0o700))
	require.NoError(t, os.MkdirAll(s.sibling, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(s.sibling, ".env"), []byte("KEY="+s.siblingCanary+"\n"), 0o600))
	// TmpRoot: without containment (the escaped-process fault) nothing
	// removes a Landlock shell's private tmp.
	pol := sandbox.Policy{Mode: m, Home: s.home, Self: sandboxtest.Self(t), TmpRoot: t.TempDir()}
	if mutate != nil {
		mutate(&pol)
	}
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + s.home, "TENANT_PROVIDER_KEY=key-" + s.mark,
		procgroup.MarkerVar + "=" + s.mark}
	s.sh = New(Options{Dir: filepath.Join(s.home, "work"), Env: env, Sandbox: &pol, Timeout: 20 * time.Second})
	t.Cleanup(func() {
		s.sh.Close()
		for _, pid := range procgroup.Marked(s.mark) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return s
}

var sandboxModes = []sandbox.Mode{sandbox.Bwrap, sandbox.Landlock, sandbox.None}

// TestSandboxedShellRunsTheProbe: in every mode the env probe works, in
// the workdir, with the tool environment and state that persists; in
// bwrap and landlock a sibling's .env and another process's environment
// are refused, while none (the positive control) reads them.
func TestSandboxedShellRunsTheProbe(t *testing.T) {
	t.Parallel()
	for _, m := range sandboxModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			s := newSandboxed(t, m, nil)
			res := run(t, s.sh, "env | sort; pwd; export KEPT=yes")
			require.Equal(t, 0, res.ExitCode, res.Output)
			require.Contains(t, res.Output, "TENANT_PROVIDER_KEY=key-"+s.mark+"\n")
			require.Contains(t, res.Output, "\n"+filepath.Join(s.home, "work")+"\n", "the probe's cwd is the workdir")
			res = run(t, s.sh, "echo kept=$KEPT; echo x > here && cat here")
			require.Equal(t, "kept=yes\nx\n", res.Output)

			res = run(t, s.sh, fmt.Sprintf("cat %s/.env; tr '\\0' '\\n' < /proc/%d/environ; true", s.sibling, os.Getpid()))
			if m == sandbox.None {
				require.Contains(t, res.Output, s.siblingCanary, "positive control: unconfined, the sibling's .env is read")
				require.Contains(t, res.Output, "PATH=", "positive control: unconfined, the test process's environment is read")
				return
			}
			require.NotContains(t, res.Output, s.siblingCanary)
			require.NotContains(t, res.Output, "PATH=", "another process's environment")
		})
	}
}

// TestSandboxedCloseEndsEveryProcess: what a command leaves running
// (setsid, a double fork, nohup) ends with Close, and with the restart
// after a timeout; with containment off (the escaped-process fault) the
// setsid child survives Close.
func TestSandboxedCloseEndsEveryProcess(t *testing.T) {
	t.Parallel()
	const leave = "setsid sleep 600 & (sleep 600 &); nohup sleep 600 >/dev/null 2>&1 & echo started"
	for _, m := range sandboxModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			s := newSandboxed(t, m, nil)
			require.Contains(t, run(t, s.sh, leave).Output, "started\n")
			require.Eventually(t, func() bool { return len(procgroup.Marked(s.mark)) >= 4 }, 20*time.Second, 10*time.Millisecond,
				"the shell and the three children are there")
			require.NoError(t, s.sh.Close())
			require.Empty(t, procgroup.Marked(s.mark), "no process of the shell survives Close")
		})
		t.Run(string(m)+"/timeout", func(t *testing.T) {
			t.Parallel()
			s := newSandboxed(t, m, nil)
			s.sh.opts.Timeout = time.Second
			res := run(t, s.sh, leave+"; sleep 600")
			require.True(t, res.TimedOut)
			require.Empty(t, procgroup.Marked(s.mark), "the timed-out shell's tree is gone before Run returns")
			require.Equal(t, "back\n", run(t, s.sh, "echo back").Output)
		})
	}
	t.Run("escaped-process fault", func(t *testing.T) {
		t.Parallel()
		s := newSandboxed(t, sandbox.Bwrap, func(p *sandbox.Policy) { p.NoContain = true })
		run(t, s.sh, "setsid sleep 600 & echo started")
		require.Eventually(t, func() bool {
			for _, pid := range procgroup.Marked(s.mark) {
				if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.HasPrefix(string(cmd), "sleep\x00") {
					return true
				}
			}
			return false
		}, 20*time.Second, 10*time.Millisecond, "the setsid sleep runs")
		require.NoError(t, s.sh.Close())
		require.NotEmpty(t, procgroup.Marked(s.mark), "without containment a setsid child outlives Close")
	})
}

// BenchmarkSandbox measures the sandbox's cost: "call" is one command in a
// live shell (what a tool call costs once the session's shell runs),
// "start" a fresh shell's first command (once per session and after a
// restart). "plain" is bash with no sandbox and no launcher, the baseline.
// Each reports its median as p50-ms.
func BenchmarkSandbox(b *testing.B) {
	for _, m := range append([]sandbox.Mode{"plain"}, sandboxModes...) {
		if m != "plain" && m != sandbox.None && sandbox.Available(m) != nil {
			b.Logf("mode %s skipped: %v", m, sandbox.Available(m))
			continue
		}
		pol := func(home string) *sandbox.Policy {
			if m == "plain" {
				return nil
			}
			return &sandbox.Policy{Mode: m, Home: home, Self: sandboxtest.Self(b)}
		}
		env := []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
		b.Run(string(m)+"/call", func(b *testing.B) {
			home := b.TempDir()
			sh := New(Options{Dir: home, Env: env, Sandbox: pol(home)})
			defer sh.Close()
			ctx := context.Background()
			if _, err := sh.Run(ctx, "true"); err != nil {
				b.Fatal(err)
			}
			var ds []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if _, err := sh.Run(ctx, "echo hi"); err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(t0))
			}
			reportP50(b, ds)
		})
		b.Run(string(m)+"/start", func(b *testing.B) {
			home := b.TempDir()
			ctx := context.Background()
			var ds []time.Duration
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				sh := New(Options{Dir: home, Env: env, Sandbox: pol(home)})
				if _, err := sh.Run(ctx, "echo hi"); err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(t0))
				sh.Close()
			}
			reportP50(b, ds)
		})
	}
}

func reportP50(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	b.ReportMetric(float64(ds[len(ds)/2])/float64(time.Millisecond), "p50-ms")
}

// TestReconfineRestartsTheShell: a new sandbox ends the running shell
// and its tree; the next command runs in the new one and says so.
func TestReconfineRestartsTheShell(t *testing.T) {
	t.Parallel()
	s := newSandboxed(t, sandbox.Bwrap, nil)
	run(t, s.sh, "export KEPT=yes; setsid sleep 600 & true")
	other := t.TempDir()
	pol := &sandbox.Policy{Mode: sandbox.Bwrap, Home: s.home, Work: []string{other}, Self: sandboxtest.Self(t)}
	s.sh.SetStart(other, s.sh.opts.Env)
	s.sh.Reconfine(pol, "its sandbox changed")
	require.Empty(t, procgroup.Marked(s.mark), "the old sandbox's tree is gone")
	res := run(t, s.sh, "echo kept=$KEPT; pwd; echo x > f && cat f")
	require.Equal(t, "kept=\n"+other+"\nx\n", res.Output)
	require.Contains(t, res.Restarted, "its sandbox changed")
}
