package slowproxy_test

import (
	"bufio"
	"context"
	"math/rand/v2"
	"net"
	"net/url"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness/slowproxy"
	"github.com/tenantcanary/tenantcanary/internal/storeproc"
)

// startRedis starts a real redis-server for the test and returns its
// host:port.
func startRedis(t *testing.T) (*storeproc.Server, string) {
	t.Helper()
	if err := storeproc.Available(storeproc.Redis); err != nil {
		t.Skipf("%v (.ci/run installs it)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := storeproc.Start(ctx, storeproc.Redis, t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, srv.Stop()) })
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	return srv, u.Host
}

// goroutinesBack waits (polling, with a deadline) until the process runs
// no more goroutines than before, and fails naming the count.
func goroutinesBack(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= before {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines left after Close, %d before:\n%s", n, before, buf)
		}
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond) // a poll's interval, not a synchronisation
	}
}

// timed is how long one PING through c takes.
func timed(t *testing.T, c *redis.Client) time.Duration {
	t.Helper()
	start := time.Now()
	require.NoError(t, c.Ping(context.Background()).Err())
	return time.Since(start)
}

// TestDelayIsObserved: a PING through the proxy takes at least the delay
// set each way, and about as long as the direct one once it is taken off;
// the counters see the bytes, and Close leaves no goroutine behind.
func TestDelayIsObserved(t *testing.T) {
	_, addr := startRedis(t)
	before := runtime.NumGoroutine()
	p, err := slowproxy.Start(addr, slowproxy.Options{Rand: rand.New(rand.NewPCG(1, 2))})
	require.NoError(t, err)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 2})
	timed(t, c) // the connection, made at no delay

	p.SetDelay(slowproxy.Up, 200*time.Millisecond, 0)
	p.SetDelay(slowproxy.Down, 150*time.Millisecond, 50*time.Millisecond)
	for range 3 {
		d := timed(t, c)
		assert.GreaterOrEqual(t, d, 350*time.Millisecond, "200ms up and 150-200ms down")
		assert.Less(t, d, 5*time.Second)
	}
	p.SetDelay(slowproxy.Both, 0, 0)
	assert.Less(t, timed(t, c), 350*time.Millisecond, "no delay once it is taken off")

	// The reply reached the client a moment before the proxy counted its
	// chunk as passed: poll for the counters to settle.
	deadline := time.Now().Add(5 * time.Second)
	st := p.Stats()
	for (st.Held != 0 || st.Awaiting != 0) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // a poll's interval
		st = p.Stats()
	}
	assert.EqualValues(t, 1, st.Accepted)
	assert.EqualValues(t, 1, st.Open)
	assert.GreaterOrEqual(t, st.ChunksUp, int64(5))
	assert.GreaterOrEqual(t, st.ChunksDown, int64(5))
	assert.Positive(t, st.BytesUp)
	assert.Positive(t, st.BytesDown)
	assert.Zero(t, st.Held)
	assert.Zero(t, st.Awaiting)

	require.NoError(t, c.Close())
	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "Close is safe twice")
	goroutinesBack(t, before)
}

// TestPauseHoldsCommands: a command sent while the proxy is paused is in
// flight (Held, Awaiting) and answered only after Resume; Close with a
// paused command still returns and leaves no goroutine.
func TestPauseHoldsCommands(t *testing.T) {
	_, addr := startRedis(t)
	before := runtime.NumGoroutine()
	p, err := slowproxy.Start(addr, slowproxy.Options{})
	require.NoError(t, err)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 1, ReadTimeout: -1})
	timed(t, c)

	p.Pause()
	done := make(chan error, 1)
	go func() { done <- c.Set(context.Background(), "k", "v", 0).Err() }() // ends with Resume
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().Awaiting == 0 {
		require.True(t, time.Now().Before(deadline), "the paused command never reached the proxy: %+v", p.Stats())
		time.Sleep(5 * time.Millisecond) // a poll's interval
	}
	st := p.Stats()
	assert.EqualValues(t, 1, st.Awaiting)
	assert.EqualValues(t, 1, st.Held)
	select {
	case err := <-done:
		t.Fatalf("a command passed a paused proxy (err %v)", err)
	default:
	}
	p.Resume()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the command was not answered after Resume")
	}
	assert.Zero(t, p.Stats().Awaiting)

	// Paused again with a command held: Close still ends everything.
	p.Pause()
	go func() { done <- c.Get(context.Background(), "k").Err() }() // ends with Close
	for p.Stats().Held == 0 {
		require.True(t, time.Now().Before(deadline.Add(5*time.Second)), "the second command never reached the proxy")
		time.Sleep(5 * time.Millisecond) // a poll's interval
	}
	require.NoError(t, p.Close())
	require.Error(t, <-done, "a command held at Close fails")
	require.NoError(t, c.Close())
	goroutinesBack(t, before)
}

// TestStoreRestartBehindProxy: the store restarted on its port drops the
// proxied connections; a client reconnects through the same proxy address
// and is answered by the new server.
func TestStoreRestartBehindProxy(t *testing.T) {
	srv, addr := startRedis(t)
	p, err := slowproxy.Start(addr, slowproxy.Options{})
	require.NoError(t, err)
	defer p.Close()
	p.SetDelay(slowproxy.Both, 10*time.Millisecond, 10*time.Millisecond)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	require.NoError(t, c.Set(ctx, "before", "1", 0).Err())
	ctx2, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, srv.Restart(ctx2))
	deadline := time.Now().Add(20 * time.Second)
	for c.Ping(ctx).Err() != nil { // the first call may meet the dropped connection
		require.True(t, time.Now().Before(deadline), "no answer through the proxy after the restart")
		time.Sleep(20 * time.Millisecond) // a poll's interval
	}
	assert.GreaterOrEqual(t, p.Stats().Accepted, int64(2), "a new connection after the restart")
}

// TestCancelledCommandCounters: a go-redis command cancelled while the
// proxy holds it makes its client drop the connection (Abandoned); a raw
// client that sends a second command before the first's reply came is an
// Overlapped chunk, and reads both replies in order once resumed.
func TestCancelledCommandCounters(t *testing.T) {
	_, addr := startRedis(t)
	p, err := slowproxy.Start(addr, slowproxy.Options{})
	require.NoError(t, err)
	defer p.Close()
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 1, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	timed(t, c)
	p.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	require.Error(t, c.Get(ctx, "k").Err(), "cancelled while held")
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().Abandoned == 0 {
		require.True(t, time.Now().Before(deadline), "go-redis kept the connection of its cancelled command: %+v", p.Stats())
		time.Sleep(5 * time.Millisecond) // a poll's interval
	}
	p.Resume()

	conn, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer conn.Close()
	// The abandoned connection's held command drains once resumed: wait
	// for the counters to come back to rest, then hold this PING.
	for st := p.Stats(); st.Held != 0 || st.Awaiting != 0; st = p.Stats() {
		require.True(t, time.Now().Before(deadline.Add(5*time.Second)), "the abandoned command never drained: %+v", st)
		time.Sleep(5 * time.Millisecond) // a poll's interval
	}
	p.Pause()
	_, err = conn.Write([]byte("*1\r\n$4\r\nPING\r\n"))
	require.NoError(t, err)
	for p.Stats().Held == 0 {
		require.True(t, time.Now().Before(deadline.Add(5*time.Second)), "the first PING never reached the proxy")
		time.Sleep(5 * time.Millisecond) // a poll's interval
	}
	_, err = conn.Write([]byte("*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n"))
	require.NoError(t, err)
	for p.Stats().Overlapped == 0 {
		require.True(t, time.Now().Before(deadline.Add(10*time.Second)), "the second command was not seen overlapping: %+v", p.Stats())
		time.Sleep(5 * time.Millisecond) // a poll's interval
	}
	p.Resume()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	r := bufio.NewReader(conn)
	for _, want := range []string{"+PONG\r\n", "$2\r\n", "hi\r\n"} {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, want, line)
	}
}
