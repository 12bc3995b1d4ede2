package flood

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
)

// RoleVar, in a process's environment, makes any binary that links this
// package a flood child instead of itself (see the package doc): its value
// is the role, RoleFlooder or RoleControl.
const RoleVar = "TENANTCANARY_FLOOD_CHILD"

// The roles a child plays.
const (
	RoleFlooder = "flooder"
	RoleControl = "control"
)

func init() {
	if role, ok := os.LookupEnv(RoleVar); ok {
		os.Exit(runChild(role, os.Stdin, os.Stdout, os.Stderr))
	}
}

// runChild runs role with the parent's request on the first line of in,
// until in closes; it returns the exit status.
func runChild(role string, in io.Reader, out, errOut io.Writer) int {
	r := bufio.NewReader(in)
	line, err := r.ReadBytes('\n')
	if err != nil && len(line) == 0 {
		fmt.Fprintf(errOut, "flood %s: read the request on stdin: %v\n", role, err)
		return 2
	}
	// start closes at a line "go" (a held flood starts), stop when the
	// parent closes stdin (or dies: the parent-death signal ends the child
	// before that matters).
	start, stop := make(chan struct{}), make(chan struct{})
	go func() { // ends with stdin
		defer close(stop)
		started := false
		for {
			l, err := r.ReadString('\n')
			if strings.TrimSpace(l) == goLine && !started {
				started = true
				close(start)
			}
			if err != nil {
				return
			}
		}
	}()
	rep := &reporter{w: out}
	switch role {
	case RoleFlooder:
		var spec Spec
		if err := json.Unmarshal(line, &spec); err != nil {
			fmt.Fprintf(errOut, "flood flooder: decode the spec: %v\n", err)
			return 2
		}
		if err := runFlooder(spec, start, stop, rep); err != nil {
			fmt.Fprintf(errOut, "flood flooder: %v\n", err)
			return 1
		}
	case RoleControl:
		var opts ControlOptions
		if err := json.Unmarshal(line, &opts); err != nil {
			fmt.Fprintf(errOut, "flood control: decode the options: %v\n", err)
			return 2
		}
		if err := runControl(opts, stop, rep); err != nil {
			fmt.Fprintf(errOut, "flood control: %v\n", err)
			return 1
		}
	default:
		fmt.Fprintf(errOut, "flood: unknown role %s=%q (want %q or %q)\n", RoleVar, role, RoleFlooder, RoleControl)
		return 2
	}
	return 0
}

// reporter writes one JSON object a line, from any goroutine.
type reporter struct {
	mu sync.Mutex
	w  io.Writer
}

func (r *reporter) report(v any) {
	b, _ := json.Marshal(v)
	r.mu.Lock()
	defer r.mu.Unlock()
	_, _ = r.w.Write(append(b, '\n'))
}

// floodState is a running flood's counters.
type floodState struct {
	workers, answered, sessions, pipelined, sent, ok, refused, cut, submitted, turns atomic.Int64
	firstErr                                                                         atomic.Value // string
	// started closes when the last of all workers of the flood starts:
	// the pipelines wait for it, so the workers' first requests go first.
	started chan struct{}
	all     int64 // workers in all
}

func (s *floodState) counts() Counts {
	c := Counts{Ready: true, Workers: int(s.workers.Load()), Answered: int(s.answered.Load()), Sessions: s.sessions.Load(), Pipelined: s.pipelined.Load(), Sent: s.sent.Load(), OK: s.ok.Load(),
		Refused: s.refused.Load(), Cut: s.cut.Load(), Submitted: s.submitted.Load(), Turns: s.turns.Load()}
	c.FirstErr, _ = s.firstErr.Load().(string)
	return c
}

// call makes one flood request: an error reply (the server's limits) is
// counted as refused, a request the flood's end cut off as cut; neither is
// an error of the flood.
func (s *floodState) call(ctx context.Context, timeout time.Duration, do func(context.Context) error) bool {
	s.sent.Add(1)
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := do(cctx)
	switch {
	case err == nil:
		s.ok.Add(1)
		return true
	case ctx.Err() != nil:
		s.cut.Add(1)
	default:
		s.refuse(err)
	}
	return false
}

// refuse counts a request refused with err.
func (s *floodState) refuse(err error) {
	s.refused.Add(1)
	msg, _, _ := strings.Cut(err.Error(), "\n") // not the frames a timeout quotes
	s.firstErr.CompareAndSwap(nil, truncate(msg, 300))
}

// work is one worker of the flood: it opens a session (a refusal ends
// it) and keeps one turn running on it, back to back, until ctx ends; a
// refused turn is tried again after spec.Backoff, as the server asks.
func (s *floodState) work(ctx context.Context, spec Spec, c *harness.Conn, ends *turnEnds, prompt string) {
	if s.workers.Add(1) == s.all {
		close(s.started)
	}
	var sid string
	ok := s.call(ctx, spec.RequestTimeout, func(ctx context.Context) error {
		info, err := c.CreateSession(ctx, spec.Profile)
		sid = info.SessionID
		return err
	})
	s.answered.Add(1)
	if !ok {
		return
	}
	s.sessions.Add(1)
	ended := ends.watch(sid)
	backoff := time.NewTimer(0)
	defer backoff.Stop()
	for n := 0; ctx.Err() == nil; n++ {
		text := prompt + "." + strconv.Itoa(n)
		if s.call(ctx, spec.RequestTimeout, func(ctx context.Context) error {
			return c.Call(ctx, "prompt.submit", map[string]any{"session_id": sid, "text": text}, nil)
		}) {
			s.submitted.Add(1)
			select {
			case <-ended:
				s.turns.Add(1)
			case <-ctx.Done():
			}
			continue
		}
		backoff.Reset(spec.Backoff)
		select {
		case <-backoff.C:
		case <-ctx.Done():
		}
	}
}

// pipeline keeps spec.Pipeline session.create requests of c in flight
// until ctx ends, none of them waited on (harness.RPC.Post): a request
// answered is sent again at once, one refused after spec.Backoff (the
// server asks the flood to wait, and it does). A server that stops
// reading the connection holds the pipeline where it is: its sends wait.
// It starts once every worker of the flood has, so the workers' first
// requests go first.
func (s *floodState) pipeline(ctx context.Context, spec Spec, c *harness.Conn) {
	select {
	case <-s.started:
	case <-ctx.Done():
		return
	}
	slots := make(chan struct{}, spec.Pipeline)
	free := func() { <-slots }
	done := func(err error) { // on c's reading goroutine: no wait
		if err == nil {
			s.ok.Add(1)
			s.pipelined.Add(1)
			free()
			return
		}
		s.refuse(err)
		time.AfterFunc(spec.Backoff, free)
	}
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		s.sent.Add(1)
		if err := c.PostCreateSession(spec.Profile, done); err != nil {
			done(err)
		}
	}
}

// turnEnds routes one connection's turn-end events to the worker whose
// session they end: one goroutine reads every event once, where a wait
// of every worker's own would wake every worker at every event.
type turnEnds struct {
	mu   sync.Mutex
	subs map[string]chan struct{}
}

// watch is where the ends of session sid's turns arrive.
func (t *turnEnds) watch(sid string) <-chan struct{} {
	ch := make(chan struct{}, 1)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.subs[sid] = ch
	return ch
}

// run routes c's events until ctx ends or c closes.
func (t *turnEnds) run(ctx context.Context, c *harness.Conn, em harness.EventMap) {
	for i := 0; ; {
		ev, err := c.WaitEvent(ctx, i, "the flood's events", func(harness.Event) bool { return true })
		if err != nil {
			return
		}
		i = ev.Index + 1
		if ev.Type != em.TurnEnd && ev.Type != em.Error {
			continue
		}
		t.mu.Lock()
		ch := t.subs[ev.SessionID]
		t.mu.Unlock()
		if ch != nil {
			select {
			case ch <- struct{}{}:
			default: // one end is pending already
			}
		}
	}
}

// goLine, on a held flooder's stdin, starts its flood.
const goLine = "go"

// runFlooder floods spec's server until stop closes, reporting its counts
// every spec.Every and once more, Done, at the end. A connection it cannot
// open is an error of the flood: every connection is open (reported as
// Ready) before any worker starts, and a held flood (Spec.Hold) waits for
// start then.
func runFlooder(spec Spec, start, stop <-chan struct{}, rep *reporter) error {
	spec = spec.withDefaults()
	if err := spec.Check(); err != nil {
		return err
	}
	d, err := spec.dialect()
	if err != nil {
		return err
	}
	// work is the workers' and pipelines' context, never ended before the
	// child exits: woken at the stop, tens of thousands of them would
	// each build the error of a request cut off, while the child writes
	// its frames. ctx, which the dials and the hold wait on, ends at the
	// stop.
	work, endWork := context.WithCancel(context.Background())
	defer endWork()
	ctx, cancel := context.WithCancel(work)
	defer cancel()
	go func() { // ends with the flood (cancel) or stdin
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	// The connections are never closed one by one: a websocket close
	// waits (up to a second each) for a server that reads a flooding
	// connection slowly, as a fair one does. The child's exit closes them
	// all at once, and the server drops their sessions and turns.
	conns := make([]*harness.Conn, spec.Conns)
	errs := make([]error, spec.Conns)
	var dials sync.WaitGroup
	for i := range conns {
		dials.Add(1)
		go func() { // ends with the dial
			defer dials.Done()
			dctx, dcancel := context.WithTimeout(ctx, spec.RequestTimeout)
			defer dcancel()
			conns[i], errs[i] = harness.DialWebsocket(dctx, spec.Base, spec.Token, harness.WithDialect(d, nil))
		}()
	}
	dials.Wait()
	for i, err := range errs {
		if err != nil {
			rep.report(Counts{Done: true, Err: fmt.Sprintf("open flood connection %d of %d: %v", i+1, spec.Conns, err)})
			return nil // reported: the parent reads why
		}
	}
	rep.report(Counts{Ready: true})
	if spec.Hold {
		select {
		case <-start:
		case <-ctx.Done():
			rep.report(Counts{Ready: true, Done: true})
			return nil
		}
	}
	st := floodState{started: make(chan struct{}), all: int64(spec.Conns * spec.Workers)}
	em := d.WithDefaults().Events
	for ci, c := range conns {
		ends := &turnEnds{subs: map[string]chan struct{}{}}
		go ends.run(work, c, em) // ends with the child
		for w := 0; w < spec.Workers; w++ {
			go st.work(work, spec, c, ends, fmt.Sprintf("%s %d.%d", spec.Prompt, ci, w)) // ends with a refused session, or the child
		}
		if spec.Pipeline > 0 {
			go st.pipeline(work, spec, c) // ends with the child
		}
	}
	tick := time.NewTicker(spec.Every)
	defer tick.Stop()
	for running := true; running; {
		select {
		case <-tick.C:
			rep.report(st.counts())
		case <-ctx.Done():
			running = false
		}
	}
	// The workers are not stopped, nor waited for: one may be stuck
	// writing to a server that reads a flooding connection no faster than
	// it answers (as a fair one does), which no context ends. The child's
	// exit ends them; what they had in flight is cut off.
	final := st.counts()
	final.Cut += final.Sent - final.OK - final.Refused - final.Cut
	final.Done = true
	if spec.Frames != "" {
		if err := writeFrames(spec.Frames, conns); err != nil {
			final.Err = err.Error()
		}
	}
	rep.report(final)
	return nil
}

// writeFrames writes every frame the flood's connections received to
// path, one a line, for the parent's RPC-frame scan.
func writeFrames(path string, conns []*harness.Conn) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("flood frames: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<16)
	for _, c := range conns {
		for _, fr := range c.Frames() {
			_, _ = w.Write(fr.Raw)
			_ = w.WriteByte('\n')
		}
	}
	if err := errors.Join(w.Flush(), f.Close()); err != nil {
		return fmt.Errorf("flood frames %s: %w", path, err)
	}
	return nil
}

// controlReady is the control child's first report: where it listens.
type controlReady struct {
	Addr string `json:"addr"`
}

// runControl serves the control's unit of work on a loopback port of its
// own until stop closes.
func runControl(opts ControlOptions, stop <-chan struct{}, rep *reporter) error {
	opts = opts.withDefaults()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	rep.report(controlReady{Addr: ln.Addr().String()})
	wg.Add(1)
	go func() { // ends when the listener closes
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { // ends when the parent's connection closes
				defer wg.Done()
				serveControl(c, opts.Work)
			}()
			go func() { // closes c at the end of the child
				<-stop
				c.Close()
			}()
		}
	}()
	<-stop
	return nil
}

// serveControl answers every byte read on c with one byte, after a unit of
// work: work bytes hashed.
func serveControl(c net.Conn, work int) {
	defer c.Close()
	buf := make([]byte, 64<<10)
	var one [1]byte
	for {
		if _, err := io.ReadFull(c, one[:]); err != nil {
			return
		}
		one[0] ^= unit(buf, work)
		if _, err := c.Write(one[:]); err != nil {
			return
		}
	}
}

// unit is the control's unit of work: work bytes of SHA-256 over buf, in
// blocks of len(buf). It returns a byte of the result, so none of it can
// be optimised away.
func unit(buf []byte, work int) byte {
	var sum [32]byte
	for done := 0; done < work; done += len(buf) {
		sum = sha256.Sum256(buf)
		buf[0] ^= sum[0]
	}
	return sum[1]
}
