package proc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

const eventually = 30 * time.Second

func start(t *testing.T, spec Spec) *Proc {
	t.Helper()
	p, err := Start(context.Background(), spec)
	require.NoError(t, err)
	t.Cleanup(p.Kill)
	return p
}

// sessionLeader starts a child whose own child leaves its process group
// and session (setsid) but stays below it, and returns that grandchild's
// pid once it leads its own session.
func sessionLeader(t *testing.T, tree bool) (*Proc, int) {
	t.Helper()
	p := start(t, Spec{Name: "escaper", Argv: []string{"bash", "-c", `setsid sleep 600 & echo gc $!; wait`}, Tree: tree})
	m, err := p.WaitLine(context.Background(), regexp.MustCompile(`^gc (\d+)$`))
	require.NoError(t, err)
	gc, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Kill(gc, syscall.SIGKILL) })
	require.Eventually(t, func() bool { sid, ok := procgroup.SessionOf(gc); return ok && sid == gc },
		eventually, 5*time.Millisecond, "the grandchild never led its own session")
	return p, gc
}

func TestTreeKillEndsWhatLeftTheGroup(t *testing.T) {
	t.Parallel()
	p, gc := sessionLeader(t, true)
	p.Kill()
	require.Eventually(t, func() bool { return !procgroup.Alive(gc) }, eventually, 5*time.Millisecond,
		"a tree kill left the setsid grandchild alive")
	require.False(t, procgroup.Alive(p.Pid()))
}

// The positive control: a group kill does not reach a process that left
// the group, which is why the plugin host kills its tree.
func TestGroupKillMissesWhatLeftTheGroup(t *testing.T) {
	t.Parallel()
	p, gc := sessionLeader(t, false)
	p.Kill()
	require.False(t, procgroup.Alive(p.Pid()))
	require.True(t, procgroup.Alive(gc), "the grandchild out of the group outlived a group kill (the case Tree is for)")
}

func TestKillIsIdempotentAndWaitsFromEveryCaller(t *testing.T) {
	t.Parallel()
	p := start(t, Spec{Name: "sleeper", Argv: []string{"sleep", "600"}, Stdin: true})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Kill()
			select {
			case <-p.Done():
			default:
				t.Error("Kill returned before the child was reaped and read")
			}
		}()
	}
	wg.Wait()
	p.Kill()
	p.Abort() // after the reaping: signals nothing, fails nothing
	require.False(t, procgroup.Alive(p.Pid()))
	require.NoError(t, p.Stop(time.Second), "a child Kill ended is no failure of a later Stop")
}

func TestRawStdoutIsTheCallersAndHandshakeReadsTheFirstWords(t *testing.T) {
	t.Parallel()
	p := start(t, Spec{Name: "echo", Argv: []string{"sh", "-c", `echo hello; exec cat`}, Stdin: true, RawStdout: true})
	br := bufio.NewReader(p.Stdout())
	ctx, cancel := context.WithTimeout(context.Background(), eventually)
	defer cancel()
	require.NoError(t, p.Handshake(ctx, func() error {
		l, err := br.ReadString('\n')
		if err != nil || l != "hello\n" {
			return errors.New("no hello")
		}
		return nil
	}))
	require.NoError(t, p.Stdout().SetReadDeadline(time.Time{}), "the read end takes deadlines (a framed reader's leader needs them)")
	_, err := p.Stdin().Write([]byte("ping\n"))
	require.NoError(t, err)
	l, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ping\n", l)
	assert.Empty(t, p.Lines(), "raw stdout is not read as lines")
	require.NoError(t, p.Stdin().Close())
	<-p.Done()
	require.NoError(t, p.ExitErr())
	require.NoError(t, p.Stdout().Close())
}

func TestHandshakeTimesOutOrFailsAndKillsTheChild(t *testing.T) {
	t.Parallel()
	// Never speaks: the deadline ends the handshake (it is meant to pass).
	p := start(t, Spec{Name: "mute", Argv: []string{"sleep", "600"}, RawStdout: true, Tree: true})
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	br := bufio.NewReader(p.Stdout())
	err := p.Handshake(short, func() error { _, err := br.ReadString('\n'); return err })
	require.ErrorIs(t, err, ErrNotReady)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	<-p.Done()
	require.False(t, procgroup.Alive(p.Pid()), "a child that never got ready is killed")

	// Speaks wrongly: ready's error comes back and the child is killed.
	q := start(t, Spec{Name: "wrong", Argv: []string{"sh", "-c", `echo nonsense; exec sleep 600`}, RawStdout: true})
	bad := errors.New("not a hello")
	br = bufio.NewReader(q.Stdout())
	err = q.Handshake(context.Background(), func() error { _, _ = br.ReadString('\n'); return bad })
	require.ErrorIs(t, err, bad)
	<-q.Done()
	require.False(t, procgroup.Alive(q.Pid()))
}

func TestStderrTailLastWordsAndDiagnose(t *testing.T) {
	t.Parallel()
	var copyOf bytes.Buffer
	script := `echo "panic: boom" >&2; echo "goroutine 1 [running]:" >&2; echo "main.main()" >&2; exec sleep 600`
	p := start(t, Spec{Name: "panicker", Argv: []string{"sh", "-c", script}, RawStdout: true, Stderr: &copyOf})
	// Every line is read before the kill (else the kill may cut them off).
	require.Eventually(t, func() bool { return strings.HasSuffix(p.Tail(), "err: main.main()") }, eventually, 5*time.Millisecond)
	require.Equal(t, "panic: boom", p.LastWords(), "the last words are the panic line, not the trace after it")
	require.Equal(t, "still running", p.Diagnose())
	p.Kill()
	require.Equal(t, "signal: killed: panic: boom", p.Diagnose())
	require.Equal(t, "panic: boom\ngoroutine 1 [running]:\nmain.main()\n", copyOf.String(), "Stderr gets stderr byte for byte")

	q := start(t, Spec{Name: "quiet", Argv: []string{"sh", "-c", `echo fine >&2; exit 3`}})
	<-q.Done()
	require.Equal(t, "exit status 3", q.Diagnose(), "no last words: the exit alone")
}

func TestStartRefusesBadSpecAndEndedContext(t *testing.T) {
	t.Parallel()
	_, err := Start(context.Background(), Spec{Name: "nothing"})
	require.ErrorContains(t, err, "empty argv")
	_, err = Start(context.Background(), Spec{Name: "missing", Argv: []string{filepath.Join(t.TempDir(), "no-such-binary")}})
	require.ErrorIs(t, err, ErrStart)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Start(ctx, Spec{Name: "late", Argv: []string{"true"}})
	require.ErrorIs(t, err, ErrStart)
	require.ErrorIs(t, err, context.Canceled)
}

// The one subprocess type sits below both its users: it imports neither
// the harness nor the plugin host (nor anything of this module but the
// leaf packages procgroup and syncio).
func TestImportsStayOneWay(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	const module = "github.com/tenantcanary/tenantcanary/"
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		parsed, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range parsed.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, module) {
				assert.Contains(t, []string{module + "internal/procgroup", module + "internal/syncio"}, path, "%s imports %s", f, path)
			}
		}
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// A Stderr copy that fails does not stop the reading: a child that writes
// more than a pipe holds still runs to its end.
func TestAFailingStderrCopyStillDrainsTheChild(t *testing.T) {
	t.Parallel()
	p := start(t, Spec{Name: "chatty", Argv: []string{"sh", "-c", `yes 0123456789012345678901234567890123456789012345678901234567890123456789 | head -n 20000 >&2; echo done >&2`}, RawStdout: true, Stderr: failingWriter{}})
	select {
	case <-p.Done():
	case <-time.After(eventually):
		t.Fatal("the child blocked on stderr once its copy failed")
	}
	require.NoError(t, p.ExitErr())
	require.Contains(t, p.Tail(), "err: done")
}
