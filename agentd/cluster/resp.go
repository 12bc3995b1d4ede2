package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"
)

// respPool is the store-cancel-reply fault's Redis client (test-only; see
// package faults): a small pool of RESP connections written the way
// redis-py's asyncio client was before its fix (#2624, the March 2023
// incident): a command whose context ends while it waits for its reply
// puts its connection back in the pool as it is, the reply still on its
// way. The next caller to take that connection sends its own command and
// reads the previous command's reply, then every caller after it is one
// reply behind. The defence (go-redis, goRedis) closes such a connection.
type respPool struct {
	addr string
	db   int
	idle chan *respConn
}

type respConn struct {
	c net.Conn
	r *bufio.Reader
}

// poolSize is how many idle connections respPool keeps.
const poolSize = 4

func newRespPool(addr string, db int) *respPool {
	return &respPool{addr: addr, db: db, idle: make(chan *respConn, poolSize)}
}

func (p *respPool) conn(ctx context.Context) (*respConn, error) {
	select {
	case c := <-p.idle:
		return c, nil
	default:
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, fmt.Errorf("redis dial %s: %w", p.addr, err)
	}
	c := &respConn{c: nc, r: bufio.NewReader(nc)}
	if p.db != 0 {
		if _, err := c.roundTrip(ctx, "SELECT", strconv.Itoa(p.db)); err != nil {
			nc.Close()
			return nil, err
		}
	}
	return c, nil
}

func (p *respPool) put(c *respConn) {
	_ = c.c.SetDeadline(time.Time{})
	select {
	case p.idle <- c:
	default:
		c.c.Close()
	}
}

// do sends one command and reads one reply.
func (p *respPool) do(ctx context.Context, args ...string) (any, error) {
	c, err := p.conn(ctx)
	if err != nil {
		return nil, err
	}
	v, err := c.roundTrip(ctx, args...)
	var rerr respError
	switch {
	case err == nil, errors.As(err, &rerr):
		p.put(c)
	case ctx.Err() != nil:
		// The bug: the command was sent and its reply is still coming;
		// the connection goes back to the pool undrained.
		p.put(c)
		return nil, fmt.Errorf("redis %s: %w", args[0], ctx.Err())
	default:
		c.c.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("redis %s: %w", args[0], err)
	}
	return v, nil
}

// roundTrip writes a command and reads its reply; ctx's end interrupts
// the read (through the connection's deadline).
func (c *respConn) roundTrip(ctx context.Context, args ...string) (any, error) {
	stop := context.AfterFunc(ctx, func() { _ = c.c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	buf := []byte("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		buf = append(buf, "$"+strconv.Itoa(len(a))+"\r\n"...)
		buf = append(buf, a...)
		buf = append(buf, "\r\n"...)
	}
	if _, err := c.c.Write(buf); err != nil {
		return nil, err
	}
	v, err := readReply(c.r)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return v, err
}

// respError is an error reply (-ERR ...).
type respError string

func (e respError) Error() string { return string(e) }

// readReply reads one RESP2 reply: a string, an int64, nil, a []any, or a
// respError.
func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 {
		return nil, fmt.Errorf("short reply line %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, respError(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, fmt.Errorf("bad bulk length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		return string(b[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, fmt.Errorf("bad array length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		out := make([]any, 0, n)
		for range n {
			v, err := readReply(r)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown reply type %q", line[0])
}

func (p *respPool) Get(ctx context.Context, key string) (string, bool, error) {
	v, err := p.do(ctx, "GET", key)
	if err != nil {
		return "", false, err
	}
	switch v := v.(type) {
	case nil:
		return "", false, nil
	case string:
		return v, true, nil
	}
	return fmt.Sprint(v), true, nil // a reply of another command, taken as this one's: the bug at work
}

func (p *respPool) Set(ctx context.Context, key, val string, ttl time.Duration) error {
	args := []string{"SET", key, val}
	if ttl > 0 {
		args = append(args, "PX", strconv.FormatInt(ttl.Milliseconds(), 10))
	}
	_, err := p.do(ctx, args...)
	return err
}

func (p *respPool) Del(ctx context.Context, keys ...string) error {
	_, err := p.do(ctx, append([]string{"DEL"}, keys...)...)
	return err
}

func (p *respPool) Hold(ctx context.Context, key, member string, expires time.Time) (int64, error) {
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	exp := strconv.FormatInt(expires.UnixMilli(), 10)
	if _, err := p.do(ctx, "ZREMRANGEBYSCORE", key, "-inf", now); err != nil {
		return 0, err
	}
	if _, err := p.do(ctx, "ZADD", key, exp, member); err != nil {
		return 0, err
	}
	if _, err := p.do(ctx, "PEXPIREAT", key, exp); err != nil {
		return 0, err
	}
	v, err := p.do(ctx, "ZCARD", key)
	if err != nil {
		return 0, err
	}
	n, _ := v.(int64)
	return n, nil
}

func (p *respPool) Count(ctx context.Context, key string) (int64, error) {
	v, err := p.do(ctx, "ZCOUNT", key, "("+strconv.FormatInt(time.Now().UnixMilli(), 10), "+inf")
	if err != nil {
		return 0, err
	}
	n, _ := v.(int64)
	return n, nil
}

func (p *respPool) Drop(ctx context.Context, key, member string) error {
	_, err := p.do(ctx, "ZREM", key, member)
	return err
}

func (p *respPool) Publish(ctx context.Context, channel, msg string) (int64, error) {
	v, err := p.do(ctx, "PUBLISH", channel, msg)
	if err != nil {
		return 0, err
	}
	n, _ := v.(int64)
	return n, nil
}

func (p *respPool) Push(ctx context.Context, key, val string, ttl time.Duration) error {
	if _, err := p.do(ctx, "RPUSH", key, val); err != nil {
		return err
	}
	_, err := p.do(ctx, "PEXPIRE", key, strconv.FormatInt(ttl.Milliseconds(), 10))
	return err
}

func (p *respPool) Pop(ctx context.Context, key string, wait time.Duration) (string, bool, error) {
	secs := strconv.FormatFloat(wait.Seconds(), 'f', 3, 64)
	v, err := p.do(ctx, "BLPOP", key, secs)
	if err != nil {
		return "", false, err
	}
	list, _ := v.([]any)
	if len(list) != 2 {
		return "", false, nil
	}
	return fmt.Sprint(list[1]), true, nil
}

// Close closes the idle connections.
func (p *respPool) Close() error {
	for {
		select {
		case c := <-p.idle:
			c.c.Close()
		default:
			return nil
		}
	}
}
