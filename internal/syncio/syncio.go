// Package syncio has writers safe for concurrent use: a buffer a child
// process or server writes while a test reads it, and a lock around any
// writer that many goroutines share (one journal for many providers).
//
//	var out syncio.Buffer
//	cmd.Stdout = &out
//	... out.String() ...
package syncio

import (
	"bytes"
	"io"
	"sync"
)

// Buffer is a bytes.Buffer whose Write and String may be called from any
// goroutine.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) { return lockedWrite(&b.mu, &b.b, p) }

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Writer serialises writes to W: each Write reaches W whole, never
// interleaved with another.
type Writer struct {
	mu sync.Mutex
	W  io.Writer
}

// Write writes p to W under the lock.
func (w *Writer) Write(p []byte) (int, error) { return lockedWrite(&w.mu, w.W, p) }

// lockedWrite writes p to w holding mu.
func lockedWrite(mu *sync.Mutex, w io.Writer, p []byte) (int, error) {
	mu.Lock()
	defer mu.Unlock()
	return w.Write(p)
}

// Bytes returns a copy of everything written so far.
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.b.Bytes())
}
