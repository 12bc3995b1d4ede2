package certify

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// T is what RunT reports to: the part of *testing.T a certification uses,
// for callers outside `go test` (as testscript's RunT takes its T). Run
// adapts *testing.T to it.
//
// Run runs f as a sub-test named name and reports whether it passed; the
// certification calls it once per scenario, from several goroutines at
// once (up to Options.Parallel), and each call returns once f has. Fatalf
// and Skipf end the calling goroutine (runtime.Goexit), as in a test, and
// are only called from the goroutine RunT or a Run's f runs in. Deadline
// is when the caller must be done (ok false: no deadline).
type T interface {
	Helper()
	Log(args ...any)
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	Failed() bool
	Deadline() (deadline time.Time, ok bool)
	Run(name string, f func(T)) bool
}

// testingT is *testing.T as a T.
type testingT struct{ *testing.T }

func (t testingT) Run(name string, f func(T)) bool {
	t.Helper()
	return t.T.Run(name, func(t *testing.T) { f(testingT{t}) })
}

// logWriter writes each line given to it into t's log (a scenario's
// progress into its sub-test's log: shown with -v, or when it fails).
type logWriter struct {
	t  T
	mu sync.Mutex
}

func (w *logWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
