package flood

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
)

// ControlOptions shape a control.
type ControlOptions struct {
	// Work is the bytes hashed (SHA-256) per probe: the control's unit of
	// CPU work; default DefaultWork.
	Work int `json:"work"`
	// Marker and LogPath are the child's (see Options).
	Marker  string `json:"-"`
	LogPath string `json:"-"`
}

// DefaultWork is the control's default unit: 4 MiB hashed, a few
// milliseconds of one core at rest. A unit that short of a scheduler's
// slice would measure only how fast a sleeping process wakes (a kernel
// favours those), not the share of the cores it gets, which is what a
// turn's CPU work waits on: with four busy loops on two cores, a 512 KiB
// unit's median barely moved (0.75 to 0.88 ms) where this one's grew
// fourfold (4.8 to 19.5 ms). Probed every 50ms, it costs a tenth of one
// core.
const DefaultWork = 4 << 20

func (o ControlOptions) withDefaults() ControlOptions {
	if o.Work <= 0 {
		o.Work = DefaultWork
	}
	return o
}

// ProbeTimeout bounds one probe of a control: a machine that cannot do a
// few milliseconds' work in a minute is not measuring anything.
const ProbeTimeout = time.Minute

// Control is a loopback service in a process of its own that answers each
// probe after a fixed unit of CPU work: a path through the same machine
// as a neighbour's turn (the harness's goroutines, loopback TCP, the
// kernel's scheduler, the cores) that the target's own scheduling does
// not decide (see the package doc for why this path and no other). Its
// slowdown under a flood is the machine's share of the neighbours'
// slowdown.
type Control struct {
	p *harness.Proc

	mu   sync.Mutex // one probe at a time on conn
	conn net.Conn

	closeOnce sync.Once
	closeErr  error
}

// StartTimeout bounds a control's start: its first line, its address.
const StartTimeout = time.Minute

// StartControl starts a control and connects to it. The control lives
// until Close, or until ctx ends (its process group is killed then).
func StartControl(ctx context.Context, opts ControlOptions) (*Control, error) {
	opts = opts.withDefaults()
	p, err := startChild(ctx, RoleControl, opts, Options{Marker: opts.Marker, LogPath: opts.LogPath})
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Control, error) {
		return nil, errors.Join(err, reap(p))
	}
	sctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	line, err := p.Line(sctx, 0)
	if err != nil {
		return fail(fmt.Errorf("flood control: waiting for its address: %w\n%s", err, p.Tail()))
	}
	var ready controlReady
	if err := json.Unmarshal([]byte(line), &ready); err != nil || ready.Addr == "" {
		return fail(fmt.Errorf("flood control: its first line %q is not its address", truncate(line, 200)))
	}
	var d net.Dialer
	conn, err := d.DialContext(sctx, "tcp", ready.Addr)
	if err != nil {
		return fail(fmt.Errorf("flood control: connect to %s: %w", ready.Addr, err))
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	return &Control{p: p, conn: conn}, nil
}

// Pid is the control's pid, which is also its process group's id.
func (c *Control) Pid() int { return c.p.Pid() }

// Probe times one round trip: a byte out, the unit of work, a byte back.
func (c *Control) Probe() (time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	start := time.Now()
	if err := c.conn.SetDeadline(start.Add(ProbeTimeout)); err != nil {
		return 0, fmt.Errorf("flood control: probe: %w", err)
	}
	var one [1]byte
	if _, err := c.conn.Write(one[:]); err != nil {
		return 0, fmt.Errorf("flood control: probe: %w\n%s", err, c.p.Tail())
	}
	if _, err := io.ReadFull(c.conn, one[:]); err != nil {
		return 0, fmt.Errorf("flood control: probe: %w\n%s", err, c.p.Tail())
	}
	return time.Since(start), nil
}

// Sample probes every `every` (from the start of one probe to the start
// of the next, or at once when a probe took longer) until ctx ends and it
// has at least min probes, and returns the probes' times. A probe under
// way when ctx ends completes and counts: it ran in the window.
func (c *Control) Sample(ctx context.Context, every time.Duration, min int) ([]time.Duration, error) {
	var out []time.Duration
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		if ctx.Err() != nil && len(out) >= min {
			return out, nil
		}
		select {
		case <-ctx.Done():
			<-timer.C // the window is over; a few probes more make it measurable
		case <-timer.C:
		}
		start := time.Now()
		d, err := c.Probe()
		if err != nil {
			return out, err
		}
		out = append(out, d)
		timer.Reset(max(0, every-time.Since(start)))
	}
}

// Close ends the control, kills its process group and proves it empty.
// Safe to call more than once.
func (c *Control) Close() error {
	c.closeOnce.Do(func() {
		c.conn.Close()
		_ = c.p.Stdin().Close()
		c.closeErr = reap(c.p)
	})
	return c.closeErr
}
