package server

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"
)

// frameLog is what a test connection received, awaited by predicate: the
// one wait loop every test client of this package shares.
type frameLog struct {
	mu     sync.Mutex
	frames []map[string]any
	change chan struct{} // closed and made anew at every frame
}

// add records a frame and wakes the waiters.
func (l *frameLog) add(m map[string]any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.frames = append(l.frames, m)
	if l.change != nil {
		close(l.change)
	}
	l.change = make(chan struct{})
}

// count is the number of frames so far.
func (l *frameLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.frames)
}

// matches counts the frames from index from on that pred matches, and
// returns the first, with the channel that closes at the next frame.
func (l *frameLog) matches(from int, pred func(map[string]any) bool) (first map[string]any, n int, next <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.change == nil {
		l.change = make(chan struct{})
	}
	for _, m := range l.frames[min(from, len(l.frames)):] {
		if pred(m) {
			if first == nil {
				first = m
			}
			n++
		}
	}
	return first, n, l.change
}

// waitN waits until n frames from index from on match pred, or ctx ends;
// it returns the first of them.
func (l *frameLog) waitN(ctx context.Context, from, n int, pred func(map[string]any) bool) (map[string]any, error) {
	for {
		first, seen, next := l.matches(from, pred)
		if seen >= n {
			return first, nil
		}
		select {
		case <-next:
		case <-ctx.Done():
			return nil, fmt.Errorf("%d of %d: %w", seen, n, ctx.Err())
		}
	}
}

// waitFor is waitN of one frame within 30 s, failing t with what it
// waited for (and, with all, every frame) when none comes.
func (l *frameLog) waitFor(t testing.TB, from int, what string, all bool, pred func(map[string]any) bool) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := l.waitN(ctx, from, 1, pred)
	if err != nil {
		if all {
			t.Fatalf("timed out waiting for %s; frames: %s", what, l.text())
		}
		t.Fatalf("timed out waiting for %s", what)
	}
	return m
}

// text is every frame as JSON.
func (l *frameLog) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, _ := json.Marshal(l.frames)
	return string(b)
}
