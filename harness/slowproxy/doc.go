// Package slowproxy is a delaying TCP proxy the harness puts in front of a
// shared store (Redis, PostgreSQL): it listens on loopback, forwards each
// connection to the store, and holds every chunk of bytes it reads for a
// delay the caller sets per direction (plus a jitter drawn from the
// caller's seeded rand) before it writes it on. A slow store is the
// condition under which a cancelled request meets a store command in
// flight: the moment a pooled client must drop or drain its connection
// (redis-py #2624).
//
//	p, err := slowproxy.Start("127.0.0.1:6379", slowproxy.Options{Rand: rng})
//	defer p.Close()
//	p.SetDelay(slowproxy.Both, 50*time.Millisecond, 20*time.Millisecond)
//	client := redis.NewClient(&redis.Options{Addr: p.Addr()})
//
// Pause holds every chunk until Resume; Stats counts connections, bytes,
// chunks and the connections awaiting the store's answer. Order is kept
// within each direction of each connection. Close stops the listener and
// every connection and returns once all of the proxy's goroutines have.
package slowproxy
