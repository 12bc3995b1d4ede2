package scenarios

import (
	"bytes"
	"sync"
)

// logMarks remembers how far each process log was scanned, so the next
// phase scans only what was written since: a log's lines are credited to
// the phase that wrote them, once (a folded finding whose count grew
// would otherwise be reported again by every later phase).
type logMarks struct {
	mu   sync.Mutex
	seen map[any]logMark // by process (*harness.Proc), or a log's path on a running server's host
}

// logMark is how much of one log was scanned, and the bytes that ended
// it: a log whose start changed (a kept tail that dropped old lines) is
// scanned whole again.
type logMark struct {
	n    int
	tail []byte
}

// markTail is how many of the scanned bytes a mark keeps to recognise the
// same log.
const markTail = 64

// since returns the offset of text (the log of p now: a process, or a
// path on a running server's host) to scan from, and marks text as
// scanned.
func (m *logMarks) since(p any, text []byte) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen == nil {
		m.seen = map[any]logMark{}
	}
	from := 0
	if mk, ok := m.seen[p]; ok && mk.n <= len(text) && bytes.Equal(text[mk.n-len(mk.tail):mk.n], mk.tail) {
		from = mk.n
	}
	m.seen[p] = logMark{n: len(text), tail: bytes.Clone(text[max(0, len(text)-markTail):])}
	return from
}
