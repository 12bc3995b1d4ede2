package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
)

// T is the part of testing.TB a scenario uses. *testing.T satisfies it, and
// so does RunStandalone's, so `go test` and canary-run run the same code.
type T interface {
	Helper()
	Name() string
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	FailNow()
	Failed() bool
	Skipf(format string, args ...any)
	Cleanup(func())
	TempDir() string
	Context() context.Context
}

// Outcome is what a standalone run produced.
type Outcome struct {
	Failed  bool
	Skipped bool
	Log     []string // every Logf/Errorf/Fatalf line, in order
}

// RunStandalone runs fn with a T of its own, outside `go test`: Fatalf and
// FailNow end fn's goroutine as they do in a test, a panic fails the run
// with its stack, and cleanups run last to first after fn ends. Temporary
// folders go under tempRoot and are removed unless keep is set; with keep,
// the run's log (what passing runs otherwise drop) is kept beside them, in
// tempRoot/KeptLog.
func RunStandalone(ctx context.Context, name, tempRoot string, keep bool, fn func(T)) Outcome {
	st := &standaloneT{name: name, ctx: ctx, tempRoot: tempRoot}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if r := recover(); r != nil {
				st.Errorf("panic: %v\n%s", r, debug.Stack())
			}
		}()
		fn(st)
	}()
	<-done
	st.runCleanups()
	if !keep {
		for _, d := range st.temps {
			_ = os.RemoveAll(d)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	out := Outcome{Failed: st.failed, Skipped: st.skipped, Log: append([]string(nil), st.log...)}
	if keep {
		if err := keepLog(tempRoot, out.Log); err != nil {
			out.Failed = true
			out.Log = append(out.Log, err.Error())
		}
	}
	return out
}

// KeptLog is the file under a kept run's tempRoot that holds its log.
const KeptLog = "run.log"

// keepLog writes a kept run's log lines into dir/KeptLog.
func keepLog(dir string, lines []string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("keep the run's log: %w", err)
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(strings.TrimRight(l, "\n"))
		b.WriteByte('\n')
	}
	if err := os.WriteFile(filepath.Join(dir, KeptLog), []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("keep the run's log: %w", err)
	}
	return nil
}

type standaloneT struct {
	name     string
	ctx      context.Context
	tempRoot string

	mu       sync.Mutex
	failed   bool
	skipped  bool
	log      []string
	cleanups []func()
	temps    []string
}

func (s *standaloneT) Helper()                  {}
func (s *standaloneT) Name() string             { return s.name }
func (s *standaloneT) Context() context.Context { return s.ctx }

func (s *standaloneT) Logf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, fmt.Sprintf(format, args...))
}

func (s *standaloneT) Errorf(format string, args ...any) {
	s.Logf(format, args...)
	s.mu.Lock()
	s.failed = true
	s.mu.Unlock()
}

func (s *standaloneT) Fatalf(format string, args ...any) {
	s.Errorf(format, args...)
	runtime.Goexit()
}

func (s *standaloneT) FailNow() {
	s.mu.Lock()
	s.failed = true
	s.mu.Unlock()
	runtime.Goexit()
}

func (s *standaloneT) Skipf(format string, args ...any) {
	s.Logf(format, args...)
	s.mu.Lock()
	s.skipped = true
	s.mu.Unlock()
	runtime.Goexit()
}

func (s *standaloneT) Failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

func (s *standaloneT) Cleanup(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, f)
}

func (s *standaloneT) TempDir() string {
	if err := os.MkdirAll(s.tempRoot, 0o755); err != nil {
		s.Fatalf("temp dir: %v", err)
	}
	dir, err := os.MkdirTemp(s.tempRoot, strings.NewReplacer("/", "-", " ", "-").Replace(s.name)+"-")
	if err != nil {
		s.Fatalf("temp dir: %v", err)
	}
	s.mu.Lock()
	s.temps = append(s.temps, dir)
	s.mu.Unlock()
	return filepath.Clean(dir)
}

// runCleanups runs every cleanup last to first; one that calls Fatalf or
// panics stops only itself.
func (s *standaloneT) runCleanups() {
	for {
		s.mu.Lock()
		n := len(s.cleanups)
		if n == 0 {
			s.mu.Unlock()
			return
		}
		f := s.cleanups[n-1]
		s.cleanups = s.cleanups[:n-1]
		s.mu.Unlock()
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer func() {
				if r := recover(); r != nil {
					s.Errorf("cleanup panic: %v", r)
				}
			}()
			f()
		}()
		<-done
	}
}
