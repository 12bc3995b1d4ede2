package rpc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// MaxLineFrame is the largest frame ServeLines accepts.
const MaxLineFrame = 16 << 20

// MaxLineInFlight bounds the requests ServeLines has read and not yet
// answered: past it, the input is not read until one is answered.
const MaxLineInFlight = 1024

var connSeq atomic.Int64

// NewConnID returns a process-unique connection id with the given prefix.
func NewConnID(prefix string) string { return fmt.Sprintf("%s-%d", prefix, connSeq.Add(1)) }

// LineConn is a Conn writing one frame per line to w, one frame at a time.
type LineConn struct {
	id   string
	mu   sync.Mutex
	w    *bufio.Writer
	err  error
	done chan struct{}
	once sync.Once
}

// NewLineConn wraps w.
func NewLineConn(w io.Writer) *LineConn {
	return &LineConn{id: NewConnID("stdio"), w: bufio.NewWriterSize(w, 64<<10), done: make(chan struct{})}
}

// ID implements Conn.
func (c *LineConn) ID() string { return c.id }

// Done implements Conn.
func (c *LineConn) Done() <-chan struct{} { return c.done }

// Close marks the connection gone; later Sends fail.
func (c *LineConn) Close() {
	c.once.Do(func() { close(c.done) })
}

// Send implements Conn: the frame and a newline, flushed.
func (c *LineConn) Send(frame []byte) error {
	if bytes.IndexByte(frame, '\n') >= 0 {
		return errors.New("send frame: frame holds a newline")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	_, _ = c.w.Write(frame)
	_ = c.w.WriteByte('\n')
	if err := c.w.Flush(); err != nil {
		c.err = fmt.Errorf("send frame: %w", err)
		c.Close()
		return c.err
	}
	return nil
}

// ServeLines reads one frame per line from r and dispatches each in a
// goroutine of its own, answering on conn. It returns when r ends (nil) or
// fails, or ctx ends, after every request it started has been answered.
func ServeLines(ctx context.Context, d *Dispatcher, r io.Reader, conn *LineConn) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	lines := make(chan []byte)
	errc := make(chan error, 1)
	go func() { // owned by the reader: ends when r ends (stdin EOF or close)
		br := bufio.NewReaderSize(r, 64<<10)
		for {
			line, err := readLine(br)
			if len(bytes.TrimSpace(line)) > 0 || errors.Is(err, errFrameTooLarge) {
				select {
				case lines <- line:
				case <-ctx.Done():
					errc <- nil
					return
				}
			}
			if err != nil && !errors.Is(err, errFrameTooLarge) {
				if err == io.EOF {
					err = nil
				}
				errc <- err
				return
			}
		}
	}()
	inflight := make(chan struct{}, MaxLineInFlight)
	for {
		select {
		case <-ctx.Done():
			return nil
		case inflight <- struct{}{}:
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			if err != nil {
				return fmt.Errorf("read frames: %w", err)
			}
			return nil
		case line := <-lines:
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-inflight }()
				if line == nil {
					reply(conn, null, nil, Errorf(CodeParse, "parse error: frame larger than %d bytes", MaxLineFrame))
					return
				}
				d.Dispatch(ctx, conn, line)
			}()
		}
	}
}

var errFrameTooLarge = errors.New("frame too large")

// readLine returns the next line without its newline; a line longer than
// MaxLineFrame is skipped whole and reported as (nil, errFrameTooLarge).
func readLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	tooLarge := false
	for {
		part, err := br.ReadSlice('\n')
		if !tooLarge {
			if len(buf)+len(part) > MaxLineFrame {
				tooLarge = true
				buf = nil
			} else {
				buf = append(buf, part...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if tooLarge {
			if err != nil {
				return nil, err
			}
			return nil, errFrameTooLarge
		}
		return bytes.TrimRight(buf, "\r\n"), err
	}
}
