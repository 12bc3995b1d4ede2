package harness

import (
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

func startBash(t *testing.T, ctx context.Context, script string) *Proc {
	t.Helper()
	p, err := StartProc(ctx, ProcSpec{Name: "bash", Argv: []string{"bash", "-c", script}, LogPath: filepath.Join(t.TempDir(), "log"), Stdin: true})
	require.NoError(t, err)
	t.Cleanup(p.Kill)
	return p
}

func TestProcReadyLineAndLog(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := startBash(t, ctx, `echo boot >&2; echo "backend listening on 127.0.0.1:4242"; read x; echo got $x`)
	m, err := p.WaitLine(ctx, regexp.MustCompile(`backend listening on [\d.]+:(\d+)`))
	require.NoError(t, err)
	assert.Equal(t, "4242", m[1])
	_, err = p.Stdin().Write([]byte("hello\n"))
	require.NoError(t, err)
	line, err := p.Line(ctx, 1)
	require.NoError(t, err)
	assert.Equal(t, "got hello", line)
	<-p.Done()
	require.NoError(t, p.ExitErr())
	out := p.Output()
	assert.Contains(t, out, "err | boot")
	assert.Contains(t, out, "out | got hello")
}

func TestProcNeverReadyAndEarlyExitAreDistinct(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := startBash(t, ctx, `echo starting; exec sleep 300`)
	// The line is in before the short wait starts, so the error must quote
	// it however slow the machine is; the short deadline is meant to pass.
	_, err := p.Line(ctx, 0)
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = p.WaitLine(short, regexp.MustCompile(`ready`))
	require.ErrorIs(t, err, ErrNotReady)
	assert.Contains(t, err.Error(), "out: starting", "the error shows the last output")

	q := startBash(t, ctx, `echo "fatal: port 1 in use" >&2; exit 75`)
	_, err = q.WaitLine(ctx, regexp.MustCompile(`ready`))
	require.ErrorIs(t, err, ErrExited)
	assert.Contains(t, err.Error(), "port 1 in use")
	<-q.Done()
	var exit interface{ ExitCode() int }
	require.True(t, errors.As(q.ExitErr(), &exit))
	assert.Equal(t, 75, exit.ExitCode())

	// stdout closes well before the start-up error reaches stderr: the
	// error still quotes it, because WaitLine reads stderr to its end first.
	r := startBash(t, ctx, `exec 1>&-; sleep 0.3; echo "fatal: late on stderr" >&2; exit 75`)
	_, err = r.WaitLine(ctx, regexp.MustCompile(`ready`))
	require.ErrorIs(t, err, ErrExited)
	assert.Contains(t, err.Error(), "late on stderr")
}

func TestProcStopKillsTheWholeGroupOnEveryPath(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A server that ignores SIGTERM and has a child of its own.
	p := startBash(t, ctx, `trap '' TERM; sleep 300 & echo child $!; wait`)
	line, err := p.Line(ctx, 0)
	require.NoError(t, err)
	child, err := strconv.Atoi(strings.TrimPrefix(line, "child "))
	require.NoError(t, err)
	require.True(t, procgroup.Alive(child))
	err = p.Stop(100 * time.Millisecond)
	require.ErrorContains(t, err, "killed")
	require.Eventually(t, func() bool { return !procgroup.Alive(child) }, 10*time.Second, 5*time.Millisecond)
	p.Kill() // idempotent after Stop

	// The context's end kills the group too.
	ctx2, cancel2 := context.WithCancel(context.Background())
	q := startBash(t, ctx2, `sleep 300 & echo child $!; wait`)
	line, err = q.Line(ctx, 0)
	require.NoError(t, err)
	child, _ = strconv.Atoi(strings.TrimPrefix(line, "child "))
	cancel2()
	<-q.Done()
	require.Eventually(t, func() bool { return !procgroup.Alive(child) }, 10*time.Second, 5*time.Millisecond)
}

func TestProcCleanStopReturnsExitStatus(t *testing.T) {
	t.Parallel()
	// No stdin pipe: a serve backend, asked to leave by SIGTERM alone.
	p, err := StartProc(context.Background(), ProcSpec{Name: "serve", Argv: []string{"bash", "-c", `trap 'exit 0' TERM; echo up; while :; do sleep 0.05; done`}})
	require.NoError(t, err)
	defer p.Kill()
	_, err = p.Line(context.Background(), 0)
	require.NoError(t, err)
	require.NoError(t, p.Stop(10*time.Second))
}

func TestStartProcRejectsBadSpec(t *testing.T) {
	t.Parallel()
	_, err := StartProc(context.Background(), ProcSpec{Name: "nothing"})
	require.ErrorContains(t, err, "empty argv")
	_, err = StartProc(context.Background(), ProcSpec{Name: "missing", Argv: []string{filepath.Join(t.TempDir(), "no-such-binary")}})
	require.ErrorContains(t, err, "start missing")
	_, err = StartProc(context.Background(), ProcSpec{Name: "badlog", Argv: []string{"true"}, LogPath: filepath.Join(t.TempDir(), "no", "dir", "log")})
	require.ErrorContains(t, err, "open log")
}

func TestSIGTERMByDefaultActionIsACleanStopForTheSandbox(t *testing.T) {
	t.Parallel()
	p, err := StartProc(context.Background(), ProcSpec{Name: "sleeper", Argv: []string{"sleep", "300"}})
	require.NoError(t, err)
	err = p.Stop(10 * time.Second)
	require.Error(t, err)
	assert.True(t, isSignalExit(err), "%v", err)
	q, err := StartProc(context.Background(), ProcSpec{Name: "failer", Argv: []string{"sh", "-c", "exit 3"}})
	require.NoError(t, err)
	<-q.Done()
	assert.False(t, isSignalExit(q.ExitErr()))
	assert.False(t, isSignalExit(nil))
}

func TestProcStopReturnsWhileAnEscapedGrandchildHoldsItsOutput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A server whose grandchild left its process group (setsid) with the
	// server's stdout and stderr, as a tenant's escaping process does: the
	// group kill does not reach it, and it holds the pipes open.
	p := startBash(t, ctx, `setsid -f sh -c 'echo grandchild $$; exec sleep 600'; trap 'exit 0' TERM; echo up; while :; do sleep 0.05; done`)
	m, err := p.WaitLine(ctx, regexp.MustCompile(`^grandchild (\d+)$`))
	require.NoError(t, err)
	gc, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Kill(gc, syscall.SIGKILL) })
	_, err = p.WaitLine(ctx, regexp.MustCompile(`^up$`))
	require.NoError(t, err)

	stopped := make(chan error, 1)
	go func() { stopped <- p.Stop(10 * time.Second) }()
	select {
	case err := <-stopped:
		require.NoError(t, err, "the server left cleanly on SIGTERM")
	case <-time.After(2 * time.Minute):
		t.Fatal("Stop did not return while the escaped grandchild holds the server's output")
	}
	<-p.Done()
	assert.True(t, procgroup.Alive(gc), "the grandchild, out of the group, still holds the pipes (the case under test)")
}

func TestStopServerTakesSIGTERMsDefaultActionAsAStop(t *testing.T) {
	t.Parallel()
	// A server with no SIGTERM handler dies of the signal: stopped as asked.
	p, err := StartProc(context.Background(), ProcSpec{Name: "sleeper", Argv: []string{"sleep", "300"}})
	require.NoError(t, err)
	defer p.Kill()
	require.NoError(t, p.StopServer(10*time.Second))
	// One that fails on its way out is still an error.
	q, err := StartProc(context.Background(), ProcSpec{Name: "failer", Argv: []string{"bash", "-c", `trap 'exit 3' TERM; echo up; while :; do sleep 0.05; done`}})
	require.NoError(t, err)
	defer q.Kill()
	_, err = q.Line(context.Background(), 0)
	require.NoError(t, err)
	require.ErrorContains(t, q.StopServer(10*time.Second), "exit status 3")
}
