package harness

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

	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

// Errors of a process's life, distinct so a caller can tell a target that
// never got ready from one that died.
var (
	ErrExited   = errors.New("process exited")
	ErrNotReady = errors.New("process not ready before the deadline")
	ErrStart    = errors.New("process could not be started")
)

// ProcSpec describes a child the harness runs.
type ProcSpec struct {
	Name    string   // for errors and logs, e.g. "agentd serve"
	Argv    []string // program and arguments
	Dir     string   // working directory
	Env     []string // the complete environment (see tenants.HermeticEnv)
	LogPath string   // stdout and stderr are appended here, line by line, prefixed by stream
	Stdin   bool     // keep a pipe to the child's stdin (stdio RPC); else stdin is /dev/null
}

// Proc is one running child in a process group of its own. Its stdout lines
// are kept in order and can be waited on; stdout and stderr both go to the
// log file. Stop and Kill are safe to call more than once and from any
// goroutine; they return after the child is reaped and every reader has
// finished.
type Proc struct {
	spec  ProcSpec
	cmd   *exec.Cmd
	stdin io.WriteCloser
	log   *os.File

	mu      sync.Mutex
	cond    *sync.Cond
	lines   []string // stdout lines so far
	tail    []string // last lines of stdout and stderr, for error messages
	eof     bool     // stdout reached EOF
	exited  bool
	exitErr error

	readers sync.WaitGroup
	drained chan struct{} // closed once stdout and stderr are both read to EOF
	reaped  chan struct{} // closed once the child has exited and is reaped
	done    chan struct{}
	stopped sync.Once
	killed  atomic.Bool // Kill ended it
}

const tailLines = 40

// outputGrace is how long the readers of a child's output read on after
// the child exited, for what is still in the pipes, before giving up on
// the end of a pipe that another process (one that left the child's
// group) still holds.
const outputGrace = 5 * time.Second

// StartProc starts spec's program. The child runs in a new process group,
// dies with the harness (parent-death signal) and is killed as a group
// when ctx ends.
func StartProc(ctx context.Context, spec ProcSpec) (*Proc, error) {
	if len(spec.Argv) == 0 {
		return nil, fmt.Errorf("start %s: empty argv", spec.Name)
	}
	p := &Proc{spec: spec, drained: make(chan struct{}), reaped: make(chan struct{}), done: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	cmd := procgroup.CommandContext(ctx, spec.Argv[0], spec.Argv[1:]...)
	cmd.Dir, cmd.Env = spec.Dir, spec.Env
	cmd.WaitDelay = 5 * time.Second
	p.cmd = cmd
	var err error
	if spec.LogPath != "" {
		if p.log, err = os.OpenFile(spec.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return nil, fmt.Errorf("start %s: open log: %w", spec.Name, err)
		}
	}
	fail := func(err error) (*Proc, error) {
		if p.log != nil {
			p.log.Close()
		}
		return nil, fmt.Errorf("start %s: %w", spec.Name, err)
	}
	if spec.Stdin {
		if p.stdin, err = cmd.StdinPipe(); err != nil {
			return fail(err)
		}
	}
	// Pipes of our own, not cmd's: cmd.Wait then waits for the child alone,
	// and the readers read on after it, to the end or until outputGrace.
	stdout, stdoutW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	stderr, stderrW, err := os.Pipe()
	if err != nil {
		stdout.Close()
		stdoutW.Close()
		return fail(err)
	}
	cmd.Stdout, cmd.Stderr = stdoutW, stderrW
	err = cmd.Start()
	stdoutW.Close() // the child holds the write ends now
	stderrW.Close()
	if err != nil {
		stdout.Close()
		stderr.Close()
		return fail(fmt.Errorf("%w: %w", ErrStart, err))
	}
	p.readers.Add(2)
	go p.pump(stdout, "out", true)
	go p.pump(stderr, "err", false)
	go func() {
		p.readers.Wait()
		close(p.drained)
	}()
	go func() {
		err := cmd.Wait()
		close(p.reaped)
		// Read what the child left to the end. A process that left its
		// group (a setsid'd grandchild a tenant started) may hold the
		// pipes open long after: it must not hold the child's end too.
		grace := time.NewTimer(outputGrace)
		select {
		case <-p.drained:
		case <-grace.C:
		}
		grace.Stop()
		stdout.Close() // ends a reader still waiting on such a pipe
		stderr.Close()
		<-p.drained
		p.mu.Lock()
		p.exited, p.exitErr = true, err
		p.cond.Broadcast()
		p.mu.Unlock()
		if p.log != nil {
			p.log.Close()
		}
		close(p.done)
	}()
	return p, nil
}

func (p *Proc) pump(r io.Reader, stream string, keep bool) {
	defer p.readers.Done()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		line := sc.Text()
		p.mu.Lock()
		if keep {
			p.lines = append(p.lines, line)
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

// Pid is the child's pid, which is also its process group id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Name is the spec's name.
func (p *Proc) Name() string { return p.spec.Name }

// Stdin is the pipe to the child's stdin, or nil without ProcSpec.Stdin.
func (p *Proc) Stdin() io.WriteCloser { return p.stdin }

// Drained is closed once stdout and stderr are both read to their end
// (the child closed them, usually by exiting).
func (p *Proc) Drained() <-chan struct{} { return p.drained }

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

// Line returns stdout line i (0-based), waiting for it until ctx ends or
// stdout closes.
func (p *Proc) Line(ctx context.Context, i int) (string, error) {
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
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
		_ = procgroup.Signal(p.Pid(), syscall.SIGTERM)
		select {
		case <-p.reaped: // its output may take outputGrace more
		case <-deadline.C:
			killed = true
			_ = procgroup.Kill(p.Pid())
			<-p.done
		}
		// The leader is gone; anything left in its group is killed too.
		_ = procgroup.Kill(p.Pid())
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

// StopServer is Stop for a server the harness asked to leave: a server
// that SIGTERM ended by its default action (a Python server without a
// handler, as Hermes's serve backend) stopped as asked, and that is no
// error.
func (p *Proc) StopServer(grace time.Duration) error {
	if err := p.Stop(grace); err != nil && !isSignalExit(err) {
		return err
	}
	return nil
}

// Kill kills the child's process group at once and waits for it. A
// child killed so ended on purpose: a later Stop judges no exit of it.
func (p *Proc) Kill() {
	p.stopped.Do(func() {
		p.killed.Store(true)
		if p.stdin != nil {
			p.stdin.Close()
		}
		_ = procgroup.Kill(p.Pid())
		<-p.done
	})
	<-p.done
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
