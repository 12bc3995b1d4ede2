package terminal

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

func newShell(t *testing.T, opts Options) *Shell {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.Env == nil {
		opts.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + opts.Dir, "TERM=dumb"}
	}
	sh := New(opts)
	t.Cleanup(func() { sh.Close() })
	return sh
}

func run(t *testing.T, sh *Shell, cmd string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := sh.Run(ctx, cmd)
	require.NoError(t, err, "run %q", cmd)
	return res
}

func TestStatePersistsWithinAShell(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sub := dir + "/sub"
	require.NoError(t, os.Mkdir(sub, 0o700))
	sh := newShell(t, Options{Dir: dir, Env: []string{"PATH=" + os.Getenv("PATH"), "MARK=envmark-a"}})

	res := run(t, sh, "echo $MARK; pwd")
	require.Equal(t, "envmark-a\n"+dir+"\n", res.Output)
	require.Equal(t, 0, res.ExitCode)
	require.Empty(t, res.Restarted)

	run(t, sh, "export STATE=kept; cd sub")
	res = run(t, sh, "echo $STATE; pwd")
	require.Equal(t, "kept\n"+sub+"\n", res.Output)

	other := newShell(t, Options{Dir: dir})
	res = run(t, other, "echo \"[$STATE][$MARK]\"; pwd")
	require.Equal(t, "[][]\n"+dir+"\n", res.Output, "a second shell sees none of the first one's state")
}

func TestExitStatusQuotingAndNoTrailingNewline(t *testing.T) {
	t.Parallel()
	sh := newShell(t, Options{})
	res := run(t, sh, "printf 'no newline'; false")
	require.Equal(t, "no newline", res.Output)
	require.Equal(t, 1, res.ExitCode)

	res = run(t, sh, `echo 'single '"'"'quotes'"'"' and "double"'; (exit 7)`)
	require.Equal(t, "single 'quotes' and \"double\"\n", res.Output)
	require.Equal(t, 7, res.ExitCode)

	res = run(t, sh, "echo one\necho two")
	require.Equal(t, "one\ntwo\n", res.Output, "multi-line commands run whole")

	res = run(t, sh, "cat; read -r x; echo \"read:[$x]\"")
	require.Equal(t, "read:[]\n", res.Output, "commands read an empty stdin, never the sentinel")

	res = run(t, sh, "echo 'unclosed")
	require.NotEqual(t, 0, res.ExitCode, "a syntax error is the command's failure")
	res = run(t, sh, "echo still alive")
	require.Equal(t, "still alive\n", res.Output)
	require.Empty(t, res.Restarted)
}

func TestOutputCap(t *testing.T) {
	t.Parallel()
	sh := newShell(t, Options{OutputCap: 1000})
	res := run(t, sh, "head -c 100000 /dev/zero | tr '\\0' x; echo")
	require.Len(t, res.Output, 1000)
	require.Equal(t, 100001-1000, res.Truncated)
	require.Equal(t, 0, res.ExitCode)
	res = run(t, sh, "echo after")
	require.Equal(t, "after\n", res.Output, "the stream stays in step after a capped command")
}

func TestTimeoutKillsAndRestarts(t *testing.T) {
	t.Parallel()
	sh := newShell(t, Options{Timeout: 500 * time.Millisecond})
	run(t, sh, "export GONE=1")
	first := sh.Pid()
	res := run(t, sh, "sleep 300 & echo started; sleep 300")
	require.True(t, res.TimedOut)
	require.Contains(t, res.Output, "started\n")
	require.Eventually(t, func() bool { return !procgroup.Alive(first) && len(procgroup.SessionMembers(first)) == 0 },
		10*time.Second, 10*time.Millisecond, "the timed-out shell's session %d is gone", first)

	res = run(t, sh, "echo \"[$GONE]\"")
	require.Equal(t, "[]\n", res.Output)
	require.Contains(t, res.Restarted, "timed out")
	require.Equal(t, 2, sh.Starts())
}

func TestShellThatExitsIsRestarted(t *testing.T) {
	t.Parallel()
	sh := newShell(t, Options{})
	res := run(t, sh, "echo bye; exit 3")
	require.True(t, res.Exited)
	res = run(t, sh, "echo back")
	require.Equal(t, "back\n", res.Output)
	require.Contains(t, res.Restarted, "exited")
}

func TestKilledShellIsRestarted(t *testing.T) {
	t.Parallel()
	sh := newShell(t, Options{})
	run(t, sh, "true")
	pid := sh.Pid()
	procgroup.KillSession(pid)
	require.Eventually(t, func() bool { return !procgroup.Alive(pid) }, 10*time.Second, 10*time.Millisecond)
	res := run(t, sh, "echo back")
	require.Equal(t, "back\n", res.Output)
	require.Contains(t, res.Restarted, "died")
}

func TestCloseKillsEverything(t *testing.T) {
	t.Parallel()
	sh := newShell(t, Options{})
	res := run(t, sh, "set -m; sleep 300 & echo $!")
	bg := strings.TrimSpace(res.Output)
	require.NotEmpty(t, bg)
	pid := sh.Pid()
	require.NotEmpty(t, procgroup.SessionMembers(pid))
	require.NoError(t, sh.Close())
	require.Empty(t, procgroup.SessionMembers(pid), "nothing of the shell's session survives Close")
	_, err := sh.Run(context.Background(), "true")
	require.ErrorIs(t, err, ErrClosed)
	require.NoError(t, sh.Close(), "Close twice")
}

func TestContextCancelKillsCommand(t *testing.T) {
	t.Parallel()
	sh := newShell(t, Options{})
	run(t, sh, "true")
	pid := sh.Pid()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := sh.Run(ctx, "sleep 300")
		done <- err
	}()
	require.Eventually(t, func() bool { return len(procgroup.SessionMembers(pid)) >= 2 }, 10*time.Second, 5*time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Empty(t, procgroup.SessionMembers(pid))
}

func BenchmarkRun(b *testing.B) {
	sh := New(Options{Dir: b.TempDir(), Env: []string{"PATH=" + os.Getenv("PATH")}})
	defer sh.Close()
	ctx := context.Background()
	if _, err := sh.Run(ctx, "true"); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := sh.Run(ctx, "echo hi"); err != nil {
			b.Fatal(err)
		}
	}
}
