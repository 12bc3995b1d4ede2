package terminal

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

// ErrClosed is returned by Run after Close.
var ErrClosed = errors.New("terminal closed")

// Defaults for Options fields left zero.
const (
	DefaultTimeout   = 180 * time.Second
	DefaultOutputCap = 64 << 10
	startTimeout     = 10 * time.Second
)

// Options configure a Shell.
type Options struct {
	Dir       string        // working directory the shell starts in
	Env       []string      // the shell's whole environment (NAME=VALUE)
	Shell     string        // shell binary, "bash" when empty
	Timeout   time.Duration // per-command limit, DefaultTimeout when zero
	OutputCap int           // bytes of output kept per command, DefaultOutputCap when zero
	// Sandbox, when set, confines every shell this Shell starts (its Dir
	// is the shell's); Close, a timeout and a dead shell then end every
	// process the shell started, setsid and double forks included. Nil
	// runs bash unconfined, its session killed on Close.
	Sandbox *sandbox.Policy
}

// Result is one command's outcome.
type Result struct {
	Output    string // what the command printed (stdout and stderr, as a terminal shows them)
	ExitCode  int    // the command's exit status; -1 when it never finished
	Truncated int    // bytes of output dropped beyond the cap
	TimedOut  bool   // the command outran its timeout and the shell was killed
	Restarted string // non-empty when the shell was (re)started because the previous one died: why
	Exited    bool   // the shell exited during the command (it will be restarted on the next one)
}

// Shell is a persistent bash in a PTY. Its methods are safe for concurrent
// use; commands run one at a time.
type Shell struct {
	opts Options

	run    sync.Mutex // held for a whole command
	mu     sync.Mutex // guards the fields below
	proc   *proc
	closed bool
	died   string // why the previous shell died, reported by the next Run
	starts int
}

// New returns a Shell; bash starts on the first Run.
func New(opts Options) *Shell {
	if opts.Shell == "" {
		opts.Shell = "bash"
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.OutputCap <= 0 {
		opts.OutputCap = DefaultOutputCap
	}
	return &Shell{opts: opts}
}

// SetStart changes the directory and environment the next shell starts
// with (after a restart). The running shell, if any, is not touched.
func (s *Shell) SetStart(dir string, env []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.Dir = dir
	s.opts.Env = append([]string(nil), env...)
}

// Reconfine sets the sandbox of the shells started from now on. A running
// shell is ended (state and all: its sandbox cannot change around it) and
// the next Run reports why it was restarted.
func (s *Shell) Reconfine(pol *sandbox.Policy, why string) {
	s.run.Lock()
	defer s.run.Unlock()
	s.mu.Lock()
	s.opts.Sandbox = pol
	p := s.proc
	s.mu.Unlock()
	if p != nil {
		s.drop(p, why)
	}
}

// Starts is how many shells this Shell has started.
func (s *Shell) Starts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts
}

// Pid is the current shell's pid (also its process group and session id),
// 0 when none runs. In a sandbox it is the sandbox's outermost process
// (bwrap, or the launcher) rather than bash.
func (s *Shell) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Close kills the shell and everything it started. Safe to call twice.
func (s *Shell) Close() error {
	s.mu.Lock()
	s.closed = true
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p != nil {
		p.kill()
	}
	return nil
}

// Run runs one command and returns its output and status. A timeout is not
// an error: the Result says TimedOut. Errors are a closed Shell, a shell that
// cannot start, or ctx ending (the shell is then killed).
func (s *Shell) Run(ctx context.Context, command string) (Result, error) {
	s.run.Lock()
	defer s.run.Unlock()
	p, restarted, err := s.ensure(ctx)
	if err != nil {
		return Result{ExitCode: -1}, err
	}
	res, err := p.exec(ctx, command, s.opts.Timeout, s.opts.OutputCap)
	res.Restarted = restarted
	switch {
	case err != nil:
		s.drop(p, "the previous command was cancelled: "+err.Error())
		return res, err
	case res.TimedOut:
		s.drop(p, fmt.Sprintf("the previous command timed out after %s", s.opts.Timeout))
	case res.Exited:
		s.drop(p, fmt.Sprintf("the shell exited (%s)", p.exitStatus()))
	}
	return res, nil
}

// drop kills p and records why, for the next Run to report.
func (s *Shell) drop(p *proc, why string) {
	p.kill()
	s.mu.Lock()
	if s.proc == p {
		s.proc = nil
		s.died = why
	}
	s.mu.Unlock()
}

// ensure returns a live shell, starting one if needed; the string says why a
// shell was restarted ("" for the first start or a live shell).
func (s *Shell) ensure(ctx context.Context) (*proc, string, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, "", ErrClosed
	}
	p := s.proc
	why := s.died
	s.mu.Unlock()
	if p != nil && !p.dead() {
		return p, "", nil
	}
	if p != nil {
		why = fmt.Sprintf("the shell died (%s)", p.exitStatus())
		p.kill()
	}
	s.mu.Lock()
	opts := s.opts
	s.mu.Unlock()
	np, err := start(ctx, opts)
	if err != nil {
		return nil, "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		np.kill()
		return nil, "", ErrClosed
	}
	s.proc = np
	s.died = ""
	s.starts++
	return np, why, nil
}

// proc is one running bash and the goroutines that own its PTY.
type proc struct {
	cmd   *exec.Cmd
	sb    *sandbox.Cmd // nil without a sandbox
	pty   *os.File
	nonce string

	mu      sync.Mutex
	buf     []byte        // output not yet consumed by a command
	notify  chan struct{} // signalled (non-blocking) when buf grows or the reader ends
	readEnd bool

	waited   chan struct{} // closed when cmd.Wait returned
	waitErr  error
	readDone chan struct{}
	killOnce sync.Once
}

func newNonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func start(ctx context.Context, opts Options) (*proc, error) {
	argv := []string{opts.Shell, "--noprofile", "--norc", "--noediting", "-i"}
	env := opts.Env
	if env == nil {
		env = []string{}
	}
	var cmd *exec.Cmd
	var sb *sandbox.Cmd
	if opts.Sandbox != nil {
		pol := *opts.Sandbox
		pol.Dir = opts.Dir
		c, err := pol.Command(argv, env)
		if err != nil {
			return nil, fmt.Errorf("start %s in a sandbox: %w", opts.Shell, err)
		}
		sb, cmd = c, c.Cmd
	} else {
		cmd = exec.Command(argv[0], argv[1:]...)
		cmd.Dir = opts.Dir
		cmd.Env = env
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Pdeathsig: syscall.SIGKILL}
	f, err := startQuiet(cmd)
	if err != nil {
		if sb != nil {
			sb.StartFailed()
		}
		return nil, fmt.Errorf("start %s in %s: %w", opts.Shell, opts.Dir, err)
	}
	if sb != nil {
		sb.Started()
	}
	if f, err = pollable(f); err != nil {
		procgroup.KillSession(cmd.Process.Pid)
		_ = cmd.Wait()
		return nil, fmt.Errorf("start %s: %w", opts.Shell, err)
	}
	p := &proc{cmd: cmd, sb: sb, pty: f, nonce: newNonce(), notify: make(chan struct{}, 1), waited: make(chan struct{}), readDone: make(chan struct{})}
	go p.read()
	go func() {
		p.waitErr = cmd.Wait()
		close(p.waited)
	}()
	// Quiet the shell (no prompts, no job control, no history; the
	// terminal is quiet already) and wait for it to say it is ready. The
	// marker is printed from pieces so that an echo of this very line, on a
	// terminal that echoes after all, cannot match it.
	ready := "__AGENTD_" + p.nonce + "_READY__"
	init := "PS1=''; PS2=''; PS0=''; PROMPT_COMMAND=''; unset HISTFILE; set +m +H +o history; " +
		"printf '%s%s\\n' __AGENTD_" + p.nonce + " _READY__\n"
	if _, err := f.WriteString(init); err != nil {
		p.kill()
		return nil, fmt.Errorf("start %s: write init: %w", opts.Shell, err)
	}
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if _, _, err := p.until(sctx, []byte(ready+"\n"), 0); err != nil {
		p.kill()
		return nil, fmt.Errorf("start %s in %s: shell never became ready: %w", opts.Shell, opts.Dir, err)
	}
	return p, nil
}

// startQuiet starts cmd on a new PTY, its controlling terminal, and
// returns the master. The terminal neither echoes what is written to it
// nor turns LF into CR LF, from before the shell starts: set on the PTY
// here, not by an stty the shell would start (a process start per shell,
// the dearest thing a session's start does).
func startQuiet(cmd *exec.Cmd) (*os.File, error) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("open a pty: %w", err)
	}
	defer tty.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 50, Cols: 250}); err != nil {
		ptmx.Close()
		return nil, fmt.Errorf("size the pty: %w", err)
	}
	if err := quiet(tty); err != nil {
		ptmx.Close()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	if err := cmd.Start(); err != nil {
		ptmx.Close()
		return nil, err
	}
	return ptmx, nil
}

// quiet turns the terminal's echo and its output's LF to CR LF off.
func quiet(tty *os.File) error {
	fd := int(tty.Fd())
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return fmt.Errorf("read the pty's settings: %w", err)
	}
	t.Lflag &^= unix.ECHO | unix.ECHOE | unix.ECHOK | unix.ECHONL
	t.Oflag &^= unix.ONLCR
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, t); err != nil {
		return fmt.Errorf("quiet the pty: %w", err)
	}
	return nil
}

// pollable returns the PTY master as a file the runtime polls, so that
// Close ends a Read blocked on it even while a process that escaped the
// kill (no containment) still holds the terminal open.
func pollable(f *os.File) (*os.File, error) {
	fd, err := syscall.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("duplicate the pty: %w", err)
	}
	syscall.CloseOnExec(fd)
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("make the pty non-blocking: %w", err)
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), nil
}

// read copies the PTY stream into buf until the PTY closes.
func (p *proc) read() {
	defer close(p.readDone)
	chunk := make([]byte, 32<<10)
	for {
		n, err := p.pty.Read(chunk)
		p.mu.Lock()
		if n > 0 {
			p.buf = append(p.buf, chunk[:n]...)
		}
		if err != nil {
			p.readEnd = true
		}
		p.mu.Unlock()
		select {
		case p.notify <- struct{}{}:
		default:
		}
		if err != nil {
			return
		}
	}
}

// until consumes the stream up to and including marker and returns what
// came before it. It keeps at most keep bytes of that (0 = discard) and
// counts the rest as dropped, so a flood of output costs no memory.
func (p *proc) until(ctx context.Context, marker []byte, keep int) (out []byte, dropped int, err error) {
	for {
		p.mu.Lock()
		if i := bytes.Index(p.buf, marker); i >= 0 {
			out, dropped = keepHead(out, p.buf[:i], keep, dropped)
			p.buf = append(p.buf[:0], p.buf[i+len(marker):]...)
			p.mu.Unlock()
			return out, dropped, nil
		}
		// Consume all but a tail that might hold the start of the marker.
		if cut := len(p.buf) - len(marker); cut > 0 {
			out, dropped = keepHead(out, p.buf[:cut], keep, dropped)
			p.buf = append(p.buf[:0], p.buf[cut:]...)
		}
		ended := p.readEnd || p.isWaited()
		p.mu.Unlock()
		if ended {
			p.mu.Lock()
			if i := bytes.Index(p.buf, marker); i >= 0 { // arrived meanwhile
				out, dropped = keepHead(out, p.buf[:i], keep, dropped)
				p.buf = append(p.buf[:0], p.buf[i+len(marker):]...)
				p.mu.Unlock()
				return out, dropped, nil
			}
			out, dropped = keepHead(out, p.buf, keep, dropped)
			p.buf = p.buf[:0]
			p.mu.Unlock()
			return out, dropped, errShellExited
		}
		select {
		case <-p.notify:
		case <-p.waitedOrNever():
		case <-ctx.Done():
			p.mu.Lock()
			out, dropped = keepHead(out, p.buf, keep, dropped)
			p.buf = p.buf[:0]
			p.mu.Unlock()
			return out, dropped, ctx.Err()
		}
	}
}

var errShellExited = errors.New("shell exited")

func keepHead(out, b []byte, keep, dropped int) ([]byte, int) {
	room := keep - len(out)
	if room >= len(b) {
		return append(out, b...), dropped
	}
	if room > 0 {
		out = append(out, b[:room]...)
	}
	return out, dropped + len(b) - max(room, 0)
}

var endRE = regexp.MustCompile(`^_E_(-?\d+)__\n`)

// exec runs one command. The command is handed to eval as one single-quoted
// word, so a syntax error in it is the command's error and the sentinel
// line after it always runs; its stdin is /dev/null, so a command that
// reads input ends instead of swallowing the sentinel line.
func (p *proc) exec(ctx context.Context, command string, timeout time.Duration, limit int) (Result, error) {
	res := Result{ExitCode: -1}
	startMark := "__AGENTD_" + p.nonce + "_S__\n"
	endMark := "\n__AGENTD_" + p.nonce
	quoted := "'" + strings.ReplaceAll(command, "'", `'\''`) + "'"
	script := "printf '%s%s\\n' __AGENTD_" + p.nonce + " _S__\n" +
		"eval " + quoted + " </dev/null\n" +
		"__agentd_rc=$?; printf '\\n%s%s%d__\\n' __AGENTD_" + p.nonce + " _E_ \"$__agentd_rc\"\n"
	if _, err := p.pty.WriteString(script); err != nil {
		res.Exited = true
		res.Output = fmt.Sprintf("write command to shell: %v", err)
		return res, nil
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, _, err := p.until(tctx, []byte(startMark), 0); err != nil {
		return p.finish(ctx, res, nil, 0, err)
	}
	out, dropped, err := p.until(tctx, []byte(endMark), limit)
	if err != nil {
		return p.finish(ctx, res, out, dropped, err)
	}
	// The rest of the end line: _E_<status>__\n.
	for {
		p.mu.Lock()
		m := endRE.FindSubmatch(p.buf)
		if m != nil {
			res.ExitCode, _ = strconv.Atoi(string(m[1]))
			p.buf = append(p.buf[:0], p.buf[len(m[0]):]...)
			p.mu.Unlock()
			break
		}
		ended := p.readEnd
		p.mu.Unlock()
		if ended {
			return p.finish(ctx, res, out, dropped, errShellExited)
		}
		select {
		case <-p.notify:
		case <-tctx.Done():
			return p.finish(ctx, res, out, dropped, tctx.Err())
		}
	}
	res.Output = string(out)
	res.Truncated = dropped
	return res, nil
}

func (p *proc) finish(ctx context.Context, res Result, out []byte, dropped int, err error) (Result, error) {
	res.Output = string(out)
	res.Truncated = dropped
	switch {
	case errors.Is(err, errShellExited):
		res.Exited = true
		return res, nil
	case ctx.Err() != nil:
		return res, fmt.Errorf("run command: %w", ctx.Err())
	default:
		res.TimedOut = true
		return res, nil
	}
}

func (p *proc) isWaited() bool {
	select {
	case <-p.waited:
		return true
	default:
		return false
	}
}

// waitedOrNever is p.waited until it has fired once in a wait loop, then a
// channel that never fires, so a loop does not spin on it.
func (p *proc) waitedOrNever() <-chan struct{} {
	if p.isWaited() {
		return nil
	}
	return p.waited
}

func (p *proc) dead() bool {
	select {
	case <-p.waited:
		return true
	default:
	}
	p.mu.Lock()
	readEnd := p.readEnd
	p.mu.Unlock()
	// A shell killed a moment ago may not be reaped yet: a zombie is dead
	// too, and a command sent to it would be lost.
	return readEnd || !procgroup.Alive(p.cmd.Process.Pid)
}

func (p *proc) exitStatus() string {
	select {
	case <-p.waited:
		if p.waitErr == nil {
			return "exit status 0"
		}
		return p.waitErr.Error()
	default:
		return "still running"
	}
}

// kill ends the shell's whole session (the shell, its process group and any
// group a command made) and, in a sandbox, every process it started in any
// session; then it closes the PTY and waits for the owning goroutines.
func (p *proc) kill() {
	p.killOnce.Do(func() {
		if p.sb != nil {
			// The whole tree, in whatever session, gone when Stop returns.
			p.sb.Stop(p.waited)
			_ = p.pty.Close()
			<-p.readDone
			return
		}
		pid := p.cmd.Process.Pid
		procgroup.KillSession(pid)
		_ = p.pty.Close()
		<-p.waited
		<-p.readDone
		procgroup.EmptySession(pid, startTimeout)
	})
}
