package host

import (
	"bytes"
	"strings"
	"sync"
)

// tailWriter watches what a host writes to stderr for the line that says
// why it died: a Go "panic: ..." or "fatal error: ..." (an allocation past
// its memory limit reads "fatal error: runtime: out of memory").
type tailWriter struct {
	mu   sync.Mutex
	line []byte // the current line, cut at maxLastWords
	last string
}

const maxLastWords = 300

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if room := maxLastWords - len(t.line); room > 0 {
			t.line = append(t.line, chunk[:min(room, len(chunk))]...)
		}
		if i < 0 {
			break
		}
		if s := string(t.line); strings.HasPrefix(s, "panic: ") || strings.HasPrefix(s, "fatal error: ") ||
			strings.Contains(s, "ERROR: ThreadSanitizer") { // a race-enabled host's own out-of-memory
			t.last = s
		}
		t.line = t.line[:0]
		p = p[i+1:]
	}
	return n, nil
}

// lastWords is the last panic or fatal error line seen, or "".
func (t *tailWriter) lastWords() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}
