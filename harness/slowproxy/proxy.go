package slowproxy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Direction is which way bytes go through the proxy.
type Direction int

const (
	// Up is client to store: commands and queries.
	Up Direction = 1 << iota
	// Down is store to client: replies.
	Down
	// Both is Up and Down.
	Both = Up | Down
)

func (d Direction) String() string {
	switch d {
	case Up:
		return "up"
	case Down:
		return "down"
	case Both:
		return "both"
	}
	return fmt.Sprintf("Direction(%d)", int(d))
}

// Options shape Start.
type Options struct {
	// Rand draws each chunk's jitter; nil uses a source of its own. The
	// proxy uses it under its own lock only: give no two proxies, nor
	// anything else running meanwhile, the same one.
	Rand *rand.Rand
	// DialTimeout bounds a connection to the store; default 10s.
	DialTimeout time.Duration
	// Listen is the address to listen on; default 127.0.0.1:0.
	Listen string
}

// Stats are the proxy's counters since it started.
type Stats struct {
	Accepted   int64 // client connections accepted
	Open       int64 // connections open now (client and store side both up)
	DialFails  int64 // connections dropped because the store could not be reached
	BytesUp    int64 // bytes delivered to the store
	BytesDown  int64 // bytes delivered to clients
	ChunksUp   int64 // reads from clients delivered to the store
	ChunksDown int64 // reads from the store delivered to clients
	// Held is how many chunks the proxy holds now (read, not yet written
	// on): what its delays and a pause keep in flight.
	Held int64
	// Awaiting is how many connections sent the store something since the
	// last reply the proxy delivered them: each has a command in flight
	// from its client's point of view.
	Awaiting int64
	// Abandoned counts connections their client closed while awaiting a
	// reply: a client that gave up on a command in flight and dropped its
	// connection (what a pooled client must do when a command is
	// cancelled).
	Abandoned int64
	// Overlapped counts chunks a client sent while the reply to what it
	// sent before was still to come: pipelining, or a connection reused
	// with a cancelled command's reply still on its way.
	Overlapped int64
}

type delay struct{ base, jitter time.Duration }

// Proxy is a running delaying proxy. Its methods are safe for concurrent
// use.
type Proxy struct {
	target string
	ln     net.Listener
	dialTO time.Duration

	mu     sync.Mutex
	rng    *rand.Rand
	delays map[Direction]delay
	gate   chan struct{} // closed while running, open while paused
	conns  map[*pconn]struct{}
	closed bool

	done      chan struct{} // closed by Close
	ctx       context.Context
	cancel    context.CancelFunc // ends dials under way at Close
	closeOnce sync.Once
	wg        sync.WaitGroup

	accepted, open, dialFails                      atomic.Int64
	bytesUp, bytesDown, chunksUp, chunksDown, held atomic.Int64
	awaiting, abandoned, overlapped                atomic.Int64
}

// pconn is one proxied connection.
type pconn struct {
	client, store net.Conn
	awaiting      atomic.Bool
	closeOnce     sync.Once
}

func (c *pconn) close() {
	c.closeOnce.Do(func() {
		_ = c.client.Close()
		_ = c.store.Close()
	})
}

// Start listens on loopback and forwards every connection to target
// (host:port), with no delay until SetDelay sets one.
func Start(target string, opts Options) (*Proxy, error) {
	if target == "" {
		return nil, errors.New("slowproxy: no target address")
	}
	addr := opts.Listen
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("slowproxy: listen for %s: %w", target, err)
	}
	rng := opts.Rand
	if rng == nil {
		rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	to := opts.DialTimeout
	if to <= 0 {
		to = 10 * time.Second
	}
	gate := make(chan struct{})
	close(gate)
	p := &Proxy{target: target, ln: ln, dialTO: to, rng: rng, delays: map[Direction]delay{}, gate: gate,
		conns: map[*pconn]struct{}{}, done: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.accept() // ends when Close closes the listener
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the store's host:port the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// SetDelay holds every chunk going dir (Up, Down or Both) for base plus a
// jitter drawn uniformly from [0, jitter]. Zero base and jitter forward at
// once. It applies to chunks read from now on; order within a direction
// is kept whatever the jitter draws.
func (p *Proxy) SetDelay(dir Direction, base, jitter time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range []Direction{Up, Down} {
		if dir&d != 0 {
			p.delays[d] = delay{base: max(base, 0), jitter: max(jitter, 0)}
		}
	}
}

// Pause holds every chunk, both ways, until Resume. New connections are
// still accepted (and their store dialled); nothing they send passes.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default: // already paused
	}
}

// Resume lets the held chunks go (each once its delay is over).
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}

// Stats are the counters now.
func (p *Proxy) Stats() Stats {
	return Stats{Accepted: p.accepted.Load(), Open: p.open.Load(), DialFails: p.dialFails.Load(),
		BytesUp: p.bytesUp.Load(), BytesDown: p.bytesDown.Load(), ChunksUp: p.chunksUp.Load(), ChunksDown: p.chunksDown.Load(),
		Held: p.held.Load(), Awaiting: p.awaiting.Load(), Abandoned: p.abandoned.Load(), Overlapped: p.overlapped.Load()}
}

// DropConns closes every open connection at once, both sides, the chunks
// held for them dropped: what a store's crash looks like to its clients.
func (p *Proxy) DropConns() int {
	p.mu.Lock()
	list := make([]*pconn, 0, len(p.conns))
	for c := range p.conns {
		list = append(list, c)
	}
	p.mu.Unlock()
	for _, c := range list {
		c.close()
	}
	return len(list)
}

// Close stops accepting, closes every connection and returns once every
// goroutine of the proxy has returned. Safe to call twice.
func (p *Proxy) Close() error {
	var err error
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		close(p.done)
		p.cancel()
		err = p.ln.Close()
		p.DropConns()
	})
	p.wg.Wait()
	if err != nil {
		return fmt.Errorf("slowproxy: close %s: %w", p.Addr(), err)
	}
	return nil
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed (Close), or a listener that cannot go on
		}
		p.accepted.Add(1)
		p.wg.Add(1)
		go p.serve(c) // ends when either side closes, or Close
	}
}

// serve dials the store for client c and pipes both ways until one side
// ends, then closes both.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(p.ctx, p.dialTO)
	var d net.Dialer
	s, err := d.DialContext(ctx, "tcp", p.target)
	cancel()
	if err != nil {
		p.dialFails.Add(1)
		_ = c.Close()
		return
	}
	pc := &pconn{client: c, store: s}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		pc.close()
		return
	}
	p.conns[pc] = struct{}{}
	p.mu.Unlock()
	p.open.Add(1)
	var wg sync.WaitGroup
	wg.Add(2)
	go p.pipe(pc, Up, &wg)   // ends when the connection closes
	go p.pipe(pc, Down, &wg) // ends when the connection closes
	wg.Wait()
	pc.close()
	if pc.awaiting.Swap(false) {
		p.awaiting.Add(-1)
	}
	p.open.Add(-1)
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

type chunk struct {
	b   []byte
	due time.Time
}

// pipe moves dir's bytes of pc: a reader takes chunks as they come and
// stamps each with its delivery time, the writer (this goroutine) writes
// each once it is due and the proxy runs. When either ends the connection
// is closed both ways.
func (p *Proxy) pipe(pc *pconn, dir Direction, wg *sync.WaitGroup) {
	defer wg.Done()
	src, dst := pc.client, pc.store
	if dir == Down {
		src, dst = pc.store, pc.client
	}
	ch := make(chan chunk, 1024)
	readDone := make(chan struct{})
	go func() { // the reader: ends on the source's error (its close included)
		defer close(readDone)
		defer close(ch)
		var last time.Time
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				due := time.Now().Add(p.draw(dir))
				if due.Before(last) {
					due = last // order within a direction is kept
				}
				last = due
				if dir == Up {
					if pc.awaiting.Swap(true) {
						p.overlapped.Add(1)
					} else {
						p.awaiting.Add(1)
					}
				}
				p.held.Add(1)
				select {
				case ch <- chunk{b: buf[:n], due: due}:
				case <-p.done:
					p.held.Add(-1)
					return
				}
			}
			if err != nil {
				if dir == Up && !errors.Is(err, net.ErrClosed) && pc.awaiting.Load() {
					p.abandoned.Add(1) // the client left, not the proxy: with a command in flight
				}
				return
			}
		}
	}()
	defer func() {
		pc.close() // stops the reader of both directions
		for range ch {
			p.held.Add(-1)
		}
		<-readDone
	}()
	for c := range ch {
		if !p.wait(c.due) {
			p.held.Add(-1)
			return
		}
		if dir == Down && pc.awaiting.Swap(false) {
			// Before the write: once the client has the reply it may send
			// its next command at once, which is no overlap.
			p.awaiting.Add(-1)
		}
		_, err := dst.Write(c.b)
		p.held.Add(-1)
		if err != nil {
			return
		}
		if dir == Up {
			p.bytesUp.Add(int64(len(c.b)))
			p.chunksUp.Add(1)
		} else {
			p.bytesDown.Add(int64(len(c.b)))
			p.chunksDown.Add(1)
		}
	}
}

// draw is one chunk's delay going dir.
func (p *Proxy) draw(dir Direction) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.delays[dir]
	if d.jitter > 0 {
		return d.base + time.Duration(p.rng.Int64N(int64(d.jitter)+1))
	}
	return d.base
}

// wait returns once due has passed and the proxy is not paused (true), or
// when the proxy closes (false).
func (p *Proxy) wait(due time.Time) bool {
	if d := time.Until(due); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-p.done:
			t.Stop()
			return false
		}
	}
	p.mu.Lock()
	gate := p.gate
	p.mu.Unlock()
	select {
	case <-gate:
		return true
	case <-p.done:
		return false
	}
}
