// Package proc runs one child process for its whole life: started in a
// process group of its own (and killed with its owner: a parent-death
// signal), made ready within a time limit, its output read to the end (stdout
// as lines, or left raw for the caller's framed protocol), a tail of what it
// printed and its runtime's last words kept for error messages, and a Kill
// that is idempotent and returns once the child is reaped and every reader
// has finished. The harness's process driver (harness.Proc) and the plugin
// host's supervisor (host.Manager) both run their children through it.
//
//	p, err := proc.Start(ctx, proc.Spec{Name: "agentd serve", Argv: argv, Env: env})
//	if err != nil { ... }
//	defer p.Kill()
//	m, err := p.WaitLine(ctx, regexp.MustCompile(`backend listening on (\S+)`))
//
// and for a child speaking a framed protocol on stdout:
//
//	p, err := proc.Start(ctx, proc.Spec{Name: "plugin host", Argv: argv, Stdin: true, RawStdout: true, Tree: true})
//	br := bufio.NewReader(p.Stdout())
//	err = p.Handshake(ctx, func() error { return readHello(br) })
package proc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
)

// Errors of a process's life, distinct so a caller can tell a child that
// never got ready from one that died.
var (
	ErrExited   = errors.New("process exited")
	ErrNotReady = errors.New("process not ready before the deadline")
	ErrStart    = errors.New("process could not be started")
)

// Spec describes a child.
type Spec struct {
	Name    string   // for errors and logs, e.g. "agentd serve"
	Argv    []string // program and arguments
	Dir     string   // working directory
	Env     []string // the complete environment
	LogPath string   // stdout and stderr are appended here, line by line, prefixed by stream
	Stdin   bool     // keep a pipe to the child's stdin; else stdin is /dev/null

	// RawStdout leaves stdout to the caller: Stdout is its read end, which
	// the caller reads (a framed protocol) and closes. Lines, Line and
	// WaitLine then see nothing, and the log holds stderr only.
	RawStdout bool
	// Stderr, when set, also receives everything the child writes to
	// stderr, byte for byte.
	Stderr io.Writer
	// Tree makes a kill end the whole tree below the child, whatever left
	// its group (setsid, a double fork under a subreaper), not only its
	// process group (procgroup.KillTree); and nothing at all once the child
	// is reaped, when its pid and group may name other processes.
	Tree bool
	// OutputGrace is how long the readers of the child's output read on
	// after it exited, for what is still in the pipes, before giving up on
	// the end of a pipe that another process (one that left the child's
	// group) still holds (default 5s).
	OutputGrace time.Duration
}

// DefaultOutputGrace is Spec.OutputGrace's default.
const DefaultOutputGrace = 5 * time.Second

// Proc is one running child in a process group of its own. Its stdout
// lines are kept in order and can be waited on; stdout and stderr both go
// to the log file. Stop and Kill are safe to call more than once and from
// any goroutine; they return after the child is reaped and every reader
// has finished.
type Proc struct {
	spec   Spec
	cmd    *exec.Cmd
	pid    int
	stdin  io.WriteCloser
	stdout *os.File // RawStdout: the read end, the caller's
	log    *os.File

	mu      sync.Mutex
	cond    *sync.Cond
	lines   []string // stdout lines so far
	tail    []string // last lines of stdout and stderr, for error messages
	last    string   // the last panic or fatal error line on stderr
	eof     bool     // stdout reached EOF
	exitErr error

	life sync.Mutex // orders kills before the reaping
	gone bool       // reaped: its pid may name another process

	readers sync.WaitGroup
	drained chan struct{} // closed once the output is read to EOF (stdout: unless raw)
	exited  chan struct{} // closed once the child has exited, before it is reaped
	reaped  chan struct{} // closed once the child is reaped
	done    chan struct{}
	stopped sync.Once
	killed  atomic.Bool // Kill ended it
}

const tailLines = 40

// maxLastWords cuts a last-words line.
const maxLastWords = 300

// Start starts spec's program. The child runs in a new process group,
// dies with this process (parent-death signal) and is killed when ctx ends
// (its group, or its tree with Spec.Tree); pass context.WithoutCancel(ctx)
// for a child that outlives the call that starts it.
func Start(ctx context.Context, spec Spec) (*Proc, error) {
	if len(spec.Argv) == 0 {
		return nil, fmt.Errorf("start %s: empty argv", spec.Name)
	}
	if spec.OutputGrace <= 0 {
		spec.OutputGrace = DefaultOutputGrace
	}
	p := &Proc{spec: spec, drained: make(chan struct{}), exited: make(chan struct{}), reaped: make(chan struct{}), done: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	procgroup.Prepare(cmd)
	cmd.Dir, cmd.Env = spec.Dir, spec.Env
	p.cmd = cmd
	var err error
	if spec.LogPath != "" {
		if p.log, err = os.OpenFile(spec.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return nil, fmt.Errorf("start %s: open log: %w", spec.Name, err)
		}
	}
	var closers []io.Closer
	fail := func(err error) (*Proc, error) {
		for _, c := range closers {
			c.Close()
		}
		if p.log != nil {
			p.log.Close()
		}
		return nil, fmt.Errorf("start %s: %w", spec.Name, err)
	}
	if err := ctx.Err(); err != nil {
		return fail(fmt.Errorf("%w: %w", ErrStart, err))
	}
	if spec.Stdin {
		if p.stdin, err = cmd.StdinPipe(); err != nil {
			return fail(err)
		}
		closers = append(closers, p.stdin)
	}
	// Pipes of our own, not cmd's: cmd.Wait then waits for the child alone,
	// and the readers read on after it, to the end or until OutputGrace.
	stdout, stdoutW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	closers = append(closers, stdout, stdoutW)
	stderr, stderrW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	closers = append(closers, stderr, stderrW)
	cmd.Stdout, cmd.Stderr = stdoutW, stderrW
	err = cmd.Start()
	stdoutW.Close() // the child holds the write ends now
	stderrW.Close()
	if err != nil {
		return fail(fmt.Errorf("%w: %w", ErrStart, err))
	}
	p.pid = cmd.Process.Pid
	stopCtx := context.AfterFunc(ctx, func() { p.signal(false) })
	if spec.RawStdout {
		p.stdout = stdout
		p.readers.Add(1)
		p.mu.Lock()
		p.eof = true // no lines to wait for
		p.mu.Unlock()
	} else {
		p.readers.Add(2)
		go p.pump(stdout, "out", true)
	}
	go p.pump(stderr, "err", false)
	go func() {
		p.readers.Wait()
		close(p.drained)
	}()
	go p.reap(stopCtx, stdout, stderr)
	return p, nil
}

// reap waits for the child to exit, reaps it, then waits for its output.
func (p *Proc) reap(stopCtx func() bool, stdout, stderr *os.File) {
	waitExited(p.pid)
	close(p.exited)
	p.life.Lock()
	err := p.cmd.Wait()
	p.gone = true
	p.life.Unlock()
	stopCtx()
	close(p.reaped)
	// Read what the child left to the end. A process that left its group
	// (a setsid'd grandchild a tenant started) may hold the pipes open long
	// after: it must not hold the child's end too.
	grace := time.NewTimer(p.spec.OutputGrace)
	select {
	case <-p.drained:
	case <-grace.C:
	}
	grace.Stop()
	if !p.spec.RawStdout {
		stdout.Close() // ends a reader still waiting on such a pipe
	}
	stderr.Close()
	<-p.drained
	p.mu.Lock()
	p.exitErr = err
	p.cond.Broadcast()
	p.mu.Unlock()
	if p.log != nil {
		p.log.Close()
	}
	close(p.done)
}

// waitExited returns once the child pid has exited, without reaping it
// (waitid with WNOWAIT): until Wait reaps it, its pid names no other
// process, so its tree may still be killed safely.
func waitExited(pid int) {
	const pPID, wExited, wNoWait = 1, 4, 0x01000000
	var info [128]byte // siginfo_t
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid), uintptr(unsafe.Pointer(&info[0])), wExited|wNoWait, 0, 0)
		if e != syscall.EINTR {
			return
		}
	}
}

func (p *Proc) pump(r io.Reader, stream string, keep bool) {
	defer p.readers.Done()
	if !keep && p.spec.Stderr != nil {
		r = io.TeeReader(r, &copyTo{w: p.spec.Stderr})
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		line := sc.Text()
		p.mu.Lock()
		if keep {
			p.lines = append(p.lines, line)
		} else if l := line[:min(len(line), maxLastWords)]; isLastWords(l) {
			p.last = l
		}
		p.tail = append(p.tail, stream+": "+line)
		if len(p.tail) > tailLines {
			p.tail = p.tail[len(p.tail)-tailLines:]
		}
		if p.log != nil {
			fmt.Fprintf(p.log, "%s %s | %s\n", time.Now().Format("15:04:05.000"), stream, line)
		}
		p.cond.Broadcast()
		p.mu.Unlock()
	}
	// Drain whatever is left so the child never blocks on a full pipe.
	_, _ = io.Copy(io.Discard, r)
	if keep {
		p.mu.Lock()
		p.eof = true
		p.cond.Broadcast()
		p.mu.Unlock()
	}
}

// copyTo writes to w until a write fails, then drops the rest: a failing
// Spec.Stderr must not stop the reading (the child would block on a full
// pipe).
type copyTo struct {
	w      io.Writer
	failed bool
}

func (c *copyTo) Write(b []byte) (int, error) {
	if !c.failed {
		_, err := c.w.Write(b)
		c.failed = err != nil
	}
	return len(b), nil
}

// isLastWords reports whether a stderr line says why a Go program died: a
// "panic: ..." or "fatal error: ..." (an allocation past its memory limit
// reads "fatal error: runtime: out of memory"), or a race-enabled
// program's own out-of-memory.
func isLastWords(l string) bool {
	return strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") ||
		strings.Contains(l, "ERROR: ThreadSanitizer")
}

// Pid is the child's pid, which is also its process group id.
func (p *Proc) Pid() int { return p.pid }

// Name is the spec's name.
func (p *Proc) Name() string { return p.spec.Name }

// Stdin is the pipe to the child's stdin, or nil without Spec.Stdin. It
// is an *os.File underneath (write deadlines work).
func (p *Proc) Stdin() io.WriteCloser { return p.stdin }

// Stdout is the read end of the child's stdout with Spec.RawStdout, else
// nil. The caller reads it (read deadlines work) and closes it once it is
// done reading.
func (p *Proc) Stdout() *os.File { return p.stdout }

// Drained is closed once the child's output is read to its end (the child
// closed it, usually by exiting). With Spec.RawStdout only stderr counts.
func (p *Proc) Drained() <-chan struct{} { return p.drained }

// Exited is closed once the child has exited, a moment before it is
// reaped: a kill then still reaches what it left behind.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Done is closed once the child has exited and its output is read.
func (p *Proc) Done() <-chan struct{} { return p.done }

// ExitErr is the child's exit error once Done is closed (nil for status 0).
func (p *Proc) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

// Tail is the last lines the child printed, stdout and stderr interleaved.
func (p *Proc) Tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// LastWords is the last line on stderr that says why a Go program died
// ("panic: ...", "fatal error: ..."), or "".
func (p *Proc) LastWords() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// Diagnose says how the child ended, for an error message: its exit error,
// then its last words when it left any ("exit status 2: panic: boom").
// While it runs, it says so.
func (p *Proc) Diagnose() string {
	select {
	case <-p.done:
	default:
		return "still running"
	}
	why := fmt.Sprint(p.ExitErr())
	if last := p.LastWords(); last != "" {
		why = fmt.Sprintf("%s: %s", why, last)
	}
	return why
}

// Handshake is the start's time limit: it runs ready, which reads the
// child's first words (a hello frame, a ready line) and says whether they
// are right, for no longer than ctx allows. When ctx ends first, the child
// is killed and the error wraps ErrNotReady and ctx's error; when ready
// fails, the child is killed and ready's error is returned. ready must
// return once the child is gone (its output then ends).
func (p *Proc) Handshake(ctx context.Context, ready func() error) error {
	res := make(chan error, 1)
	go func() { res <- ready() }()
	select {
	case err := <-res:
		if err != nil {
			p.Kill()
		}
		return err
	case <-ctx.Done():
		p.Kill()
		<-res
		return fmt.Errorf("%w: %w", ErrNotReady, ctx.Err())
	}
}

// signal kills the child's group, or its tree with Spec.Tree, without
// waiting. afterReap kills the group of a reaped child too (not with
// Spec.Tree).
func (p *Proc) signal(afterReap bool) {
	p.life.Lock()
	defer p.life.Unlock()
	switch {
	case !p.gone && p.spec.Tree:
		procgroup.KillTree(p.pid, p.pid)
	case !p.gone || (afterReap && !p.spec.Tree):
		_ = procgroup.Kill(p.pid)
	}
}

// Abort kills the child at once (its group, or its tree with Spec.Tree)
// and returns without waiting; Done tells when it is gone. It is safe at
// any time, also after the child was reaped.
func (p *Proc) Abort() { p.signal(false) }

// Kill kills the child's process group (its tree with Spec.Tree) at once
// and waits for it. A child killed so ended on purpose: a later Stop
// judges no exit of it.
func (p *Proc) Kill() {
	p.stopped.Do(func() {
		p.killed.Store(true)
		if p.stdin != nil {
			p.stdin.Close()
		}
		p.signal(true)
		<-p.done
	})
	<-p.done
}

// Stop ends the child: it closes stdin (and gives a stdio server half of
// grace to leave on its EOF), sends SIGTERM to the group, waits for a clean
// exit until grace is spent, then kills the group. It returns the child's
// exit error (nil for a clean exit), or an error saying it had to be killed.
func (p *Proc) Stop(grace time.Duration) error {
	var killed bool
	p.stopped.Do(func() {
		deadline := time.NewTimer(grace)
		defer deadline.Stop()
		if p.stdin != nil {
			// A stdio server's first way out is stdin's EOF; give it half
			// the grace before asking with a signal.
			p.stdin.Close()
			select {
			case <-p.reaped:
			case <-time.After(grace / 2):
			}
		}
		_ = procgroup.Signal(p.pid, syscall.SIGTERM)
		select {
		case <-p.reaped: // its output may take OutputGrace more
		case <-deadline.C:
			killed = true
			p.signal(true)
			<-p.done
		}
		// The leader is gone; anything left in its group is killed too.
		p.signal(true)
	})
	<-p.done
	if killed {
		return fmt.Errorf("%s: still running %v after SIGTERM; killed\nlast output:\n%s", p.spec.Name, grace, p.Tail())
	}
	if p.killed.Load() {
		return nil // Kill ended it
	}
	return p.ExitErr()
}

// StopServer is Stop for a server asked to leave: a server that SIGTERM
// ended by its default action (a Python server without a handler) stopped
// as asked, and that is no error.
func (p *Proc) StopServer(grace time.Duration) error {
	if err := p.Stop(grace); err != nil && !IsSignalExit(err) {
		return err
	}
	return nil
}

// IsSignalExit reports whether err is the exit of a process that SIGTERM
// ended by its default action: asked to stop, it stopped.
func IsSignalExit(err error) bool {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return false
	}
	ws, ok := exit.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM
}

// Line returns stdout line i (0-based), waiting for it until ctx ends or
// stdout closes.
func (p *Proc) Line(ctx context.Context, i int) (string, error) {
	stop := syncio.WakeWhenDone(ctx, p.cond)
	defer stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for i >= len(p.lines) {
		if p.eof {
			return "", fmt.Errorf("%s: stdout closed after %d lines: %w", p.spec.Name, len(p.lines), ErrExited)
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		p.cond.Wait()
	}
	return p.lines[i], nil
}

// WaitLine waits for the first stdout line matching re and returns its
// submatches. It fails with ErrNotReady when ctx ends first and ErrExited
// when the child's stdout closes first; both errors show the child's last
// output.
func (p *Proc) WaitLine(ctx context.Context, re *regexp.Regexp) ([]string, error) {
	for i := 0; ; i++ {
		line, err := p.Line(ctx, i)
		if err != nil {
			if errors.Is(err, ErrExited) {
				// stdout closed first; a start-up error is usually on
				// stderr, which may still be in flight. Read it to its end
				// (or until ctx ends) before the error quotes the tail.
				select {
				case <-p.drained:
				case <-ctx.Done():
				}
			} else if ctx.Err() != nil {
				err = ErrNotReady
			}
			return nil, fmt.Errorf("%s: waiting for a line matching %q: %w\nlast output:\n%s", p.spec.Name, re, err, p.Tail())
		}
		if m := re.FindStringSubmatch(line); m != nil {
			return m, nil
		}
	}
}

// Lines returns a copy of every stdout line so far.
func (p *Proc) Lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// Output returns the log file's content (both streams), for failure reports.
func (p *Proc) Output() string {
	if p.spec.LogPath == "" {
		return p.Tail()
	}
	data, err := os.ReadFile(p.spec.LogPath)
	if err != nil {
		return p.Tail()
	}
	return string(bytes.TrimSpace(data))
}

// QuickRaceExit is the GORACE value gorace with atexit_sleep_ms=0 added. A
// binary built with the race detector sleeps a second at its exit unless
// told not to, and a child started with this value does not: a plugin host
// under agentd's Landlock launcher is four race-built processes ending one
// after another, so a stop would wait seconds for nothing.
func QuickRaceExit(gorace string) string {
	return strings.TrimSpace(gorace + " atexit_sleep_ms=0")
}

// QuickRaceExitForChildren sets this process's GORACE to QuickRaceExit's,
// so that the children it starts from now on (a test binary re-executed
// as a server, its plugin hosts and launchers, all race-built under -race)
// exit without that second.
func QuickRaceExitForChildren() {
	_ = os.Setenv("GORACE", QuickRaceExit(os.Getenv("GORACE")))
}
