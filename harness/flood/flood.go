package flood

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/internal/proc"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

// Errors of a child's life.
var (
	// ErrChildExited: the child ended before it reported what was waited
	// for (its output says why).
	ErrChildExited = errors.New("flood child exited")
	// ErrSurvived: a process of the child's group was still alive after
	// it was stopped (it is killed; the error names it).
	ErrSurvived = errors.New("flood child's process group outlived it")
	// ErrHook: the dialect runs an operation the flood needs as a command
	// hook, which a child cannot run (see the package doc).
	ErrHook = errors.New("the flood needs an RPC, and the target runs it as a hook")
)

// Spec is one flood: Conns connections of one tenant, Workers workers on
// each, all at once. Every worker opens a session and keeps one turn
// running on it, back to back, until the flood stops: Conns*Workers
// turns wanted at every moment, however fast the server runs them. A
// server that holds a tenant to its share refuses or queues the excess
// (a refused session ends its worker, a refused turn is tried again after
// Backoff, as agentd's refusals ask); one without limits runs them all at
// once, for as long as the neighbours are timed.
type Spec struct {
	Base    string `json:"base"`    // the serve backend, http://host:port
	Token   string `json:"token"`   // the credential every flood connection holds
	Profile string `json:"profile"` // the profile its sessions address ("" the launch profile)
	// Dialect is the target's, as its YAML (harness.Dialect; "" is
	// agentd's): see MarshalDialect.
	Dialect string `json:"dialect,omitempty"`
	Conns   int    `json:"conns"`
	Workers int    `json:"workers"` // per connection
	Prompt  string `json:"prompt"`  // a turn's text, followed by the worker's number
	// Pipeline is how many session.create requests each connection keeps
	// in flight besides its workers', none of them waited on: each one
	// answered is sent again at once, each one refused after Backoff. A
	// server without limits reads and runs them all, so its backlog stays
	// Conns*(Workers+Pipeline) requests deep however fast it runs one; a
	// server with limits stops reading the connection, or refuses, and
	// the pipeline waits. Zero: none.
	Pipeline int `json:"pipeline,omitempty"`
	// RequestTimeout bounds one request (and a connection's opening);
	// default a minute.
	RequestTimeout time.Duration `json:"request_timeout,omitempty"`
	// Backoff is how long a worker waits after a refused turn; default
	// a second (agentd's retry hint).
	Backoff time.Duration `json:"backoff,omitempty"`
	// Every is how often the child reports its counts; default 25ms.
	Every time.Duration `json:"every,omitempty"`
	// Hold makes the flooder open its connections (Counts.Ready) and
	// wait for Go before it floods: its start (a process, its
	// connections) is then off the flood's clock.
	Hold bool `json:"hold,omitempty"`
	// Frames, when set, is a file where the flooder writes every frame
	// its connections received, one a line, at its end: the parent scans
	// them as it scans its own connections' frames.
	Frames string `json:"frames,omitempty"`
}

func (s Spec) withDefaults() Spec {
	if s.RequestTimeout == 0 {
		s.RequestTimeout = time.Minute
	}
	if s.Every == 0 {
		s.Every = 25 * time.Millisecond
	}
	if s.Backoff == 0 {
		s.Backoff = time.Second
	}
	return s
}

// Check says what is wrong with s, or whether its dialect needs a hook for
// the flood's operations (ErrHook).
func (s Spec) Check() error {
	switch {
	case s.Base == "":
		return errors.New("flood spec: no base URL")
	case s.Conns <= 0 || s.Workers <= 0:
		return fmt.Errorf("flood spec: %d connection(s) of %d worker(s): both must be positive", s.Conns, s.Workers)
	case s.Pipeline < 0:
		return fmt.Errorf("flood spec: a pipeline of %d request(s) a connection: it must not be negative", s.Pipeline)
	}
	d, err := s.dialect()
	if err != nil {
		return err
	}
	for _, op := range []string{"session.create", "prompt.submit"} {
		m := d.Methods[op]
		if len(m.Hook) > 0 || (m.ByProfile != nil && len(m.ByProfile.Hook) > 0) {
			return fmt.Errorf("%w: %s", ErrHook, op)
		}
		if m.Unsupported != "" {
			return fmt.Errorf("flood: the target cannot %s: %s", op, m.Unsupported)
		}
	}
	return nil
}

func (s Spec) dialect() (harness.Dialect, error) {
	var d harness.Dialect
	if err := yaml.Unmarshal([]byte(s.Dialect), &d); err != nil {
		return d, fmt.Errorf("flood spec: dialect: %w", err)
	}
	return d, nil
}

// MarshalDialect is d as Spec.Dialect takes it.
func MarshalDialect(d harness.Dialect) (string, error) {
	b, err := yaml.Marshal(d)
	if err != nil {
		return "", fmt.Errorf("flood: encode the dialect: %w", err)
	}
	return string(b), nil
}

// Counts are what a flood sent and what came of it.
type Counts struct {
	Ready     bool   `json:"ready,omitempty"` // every connection is open
	Workers   int    `json:"workers"`         // workers that have started (each sends at once)
	Answered  int    `json:"answered"`        // workers whose session.create was answered (or cut off)
	Sessions  int64  `json:"sessions"`        // sessions the server opened for them
	Pipelined int64  `json:"pipelined"`       // sessions the server opened for the pipelines
	Sent      int64  `json:"sent"`            // requests sent
	OK        int64  `json:"ok"`              // answered with a result
	Refused   int64  `json:"refused"`         // answered with an error (the server's limits) or not at all in time
	Cut       int64  `json:"cut"`             // cut off unanswered by the flood's end
	Submitted int64  `json:"submitted"`       // turns the server took
	Turns     int64  `json:"turns"`           // turns that ended
	FirstErr  string `json:"first_error,omitempty"`
	Done      bool   `json:"done,omitempty"`  // the flood has ended: these are its final counts
	Err       string `json:"error,omitempty"` // why the flood could not run (a connection it could not open)
}

func (c Counts) String() string {
	s := fmt.Sprintf("%d worker(s), %d answered, %d session(s), %d pipelined session(s), %d request(s) sent, %d answered, %d refused, %d cut off at the end, %d turn(s) taken, %d ended",
		c.Workers, c.Answered, c.Sessions, c.Pipelined, c.Sent, c.OK, c.Refused, c.Cut, c.Submitted, c.Turns)
	if c.FirstErr != "" {
		s += fmt.Sprintf(" (first refusal: %s)", truncate(c.FirstErr, 200))
	}
	return s
}

// Options shape a child's process.
type Options struct {
	// Marker tags the child with a run's marker (procgroup.MarkerVar):
	// a sandbox of that run finds it if it outlives the run.
	Marker string
	// LogPath, when set, gets the child's stdout and stderr.
	LogPath string
}

// self is the program to re-execute: this very binary, even if its path
// was replaced or removed since it started.
func self() (string, error) {
	if _, err := os.Stat("/proc/self/exe"); err == nil {
		return "/proc/self/exe", nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("flood: find this binary to re-execute: %w", err)
	}
	return exe, nil
}

// startChild re-executes this binary as role and hands it req on stdin.
func startChild(ctx context.Context, role string, req any, opts Options) (*harness.Proc, error) {
	exe, err := self()
	if err != nil {
		return nil, err
	}
	// A race-built binary's child would sleep a second at its exit on
	// every stop.
	env := []string{RoleVar + "=" + role, "GORACE=" + proc.QuickRaceExit(os.Getenv("GORACE"))}
	if opts.Marker != "" {
		env = append(env, procgroup.MarkerVar+"="+opts.Marker)
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("flood %s: encode the request: %w", role, err)
	}
	p, err := harness.StartProc(ctx, harness.ProcSpec{Name: "flood " + role, Argv: []string{exe}, Env: env, LogPath: opts.LogPath, Stdin: true})
	if err != nil {
		return nil, fmt.Errorf("flood: start the %s: %w", role, err)
	}
	if _, err := p.Stdin().Write(append(b, '\n')); err != nil {
		p.Kill()
		return nil, fmt.Errorf("flood: hand the %s its request: %w\n%s", role, err, p.Tail())
	}
	return p, nil
}

// reap kills p's group, waits for p, and proves its group empty: a
// process of it still alive after a bounded wait is ErrSurvived.
func reap(p *harness.Proc) error {
	p.Kill()
	pid := p.Pid()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := procgroup.GroupMembers(pid)
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			_ = procgroup.Kill(pid)
			return fmt.Errorf("%s (pid %d): %w: %v", p.Name(), pid, ErrSurvived, left)
		}
		_ = procgroup.Kill(pid)
		time.Sleep(10 * time.Millisecond) // polling /proc for the group to empty
	}
}

// Flood is a running flooder process.
type Flood struct {
	p    *harness.Proc
	spec Spec

	mu      sync.Mutex
	last    Counts
	changed chan struct{} // closed and replaced at every report
	ended   bool          // stdout closed: no report will come
	read    chan struct{} // closed once every report is read

	stopOnce sync.Once
	stopErr  error
}

// Start starts spec's flood in a process of its own and returns at once:
// Wait for the flood to be on. The flood lives until Stop or Kill, or
// until ctx ends (its process group is killed then).
func Start(ctx context.Context, spec Spec, opts Options) (*Flood, error) {
	spec = spec.withDefaults()
	if err := spec.Check(); err != nil {
		return nil, err
	}
	p, err := startChild(ctx, RoleFlooder, spec, opts)
	if err != nil {
		return nil, err
	}
	f := &Flood{p: p, spec: spec, changed: make(chan struct{}), read: make(chan struct{})}
	go f.readReports() // ends when the child's stdout closes
	return f, nil
}

func (f *Flood) readReports() {
	defer close(f.read)
	for i := 0; ; i++ {
		line, err := f.p.Line(context.Background(), i)
		f.mu.Lock()
		if err != nil {
			f.ended = true
		} else {
			var c Counts // every report is whole
			if json.Unmarshal([]byte(line), &c) != nil {
				c = f.last
				c.Err = "a report that is not JSON: " + truncate(line, 200)
			}
			f.last = c
		}
		close(f.changed)
		f.changed = make(chan struct{})
		f.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// Pid is the flooder's pid, which is also its process group's id.
func (f *Flood) Pid() int { return f.p.Pid() }

// Counts are the flood's counts as last reported.
func (f *Flood) Counts() Counts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// Output is what the flooder printed (its reports and errors).
func (f *Flood) Output() string { return f.p.Output() }

// Wait waits for a report that meets cond. It fails when ctx ends first,
// when the flooder reports an error (it could not open its connections),
// or when it ends first (ErrChildExited), each error naming what was
// awaited and showing the last counts.
func (f *Flood) Wait(ctx context.Context, what string, cond func(Counts) bool) (Counts, error) {
	for {
		f.mu.Lock()
		c, ended, changed := f.last, f.ended, f.changed
		f.mu.Unlock()
		switch {
		case c.Err != "":
			return c, fmt.Errorf("flood: waiting for %s: %s", what, c.Err)
		case cond(c):
			return c, nil
		case ended || c.Done:
			return c, fmt.Errorf("flood: waiting for %s: %w (%v); last counts: %s\n%s", what, ErrChildExited, f.p.ExitErr(), c, f.p.Tail())
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return c, fmt.Errorf("flood: waiting for %s: %w; last counts: %s", what, ctx.Err(), c)
		}
	}
}

// Go starts a held flood (Spec.Hold); Wait for Ready first, or the
// flood starts once its connections are open.
func (f *Flood) Go() error {
	if _, err := io.WriteString(f.p.Stdin(), goLine+"\n"); err != nil {
		return fmt.Errorf("flood: start the held flood: %w\n%s", err, f.p.Tail())
	}
	return nil
}

// Stop ends the flood: it closes the flooder's stdin, waits for its final
// counts and its exit until ctx ends, then kills its process group and
// proves it empty. Safe to call more than once (later calls return the
// first one's result).
func (f *Flood) Stop(ctx context.Context) (Counts, error) {
	f.stopOnce.Do(func() {
		_ = f.p.Stdin().Close()
		var err error
		select {
		case <-f.p.Done():
		case <-ctx.Done():
			err = fmt.Errorf("flood: the flooder did not end after its stop: %w; killed", ctx.Err())
		}
		f.stopErr = errors.Join(err, reap(f.p))
		<-f.read
	})
	c := f.Counts()
	if f.stopErr == nil && !c.Done {
		return c, fmt.Errorf("flood: the flooder ended without its final counts (%w: %v); last: %s\n%s", ErrChildExited, f.p.ExitErr(), c, f.p.Tail())
	}
	if f.stopErr == nil && c.Err != "" {
		return c, fmt.Errorf("flood: %s", c.Err)
	}
	return c, f.stopErr
}

// Kill kills the flooder's process group at once and waits for it; safe
// to call more than once and after Stop.
func (f *Flood) Kill() {
	f.stopOnce.Do(func() {
		f.stopErr = reap(f.p)
		<-f.read
	})
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
