package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/host"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
)

func readTestdata(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return string(b)
}

// writePlugin writes plugins/<rel>/ with a manifest and one source file.
func writePlugin(t testing.TB, home, rel, manifest, src string) string {
	t.Helper()
	dir := filepath.Join(home, "plugins", rel)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "plugin.yaml"), []byte(manifest), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "plugin.go"), []byte(src), 0o644))
	return dir
}

// server is the test's stand-in for agentd's side of the boundary: a real
// tool registry whose plugin tools go to the loader, plus native tools.
type server struct {
	mu     sync.Mutex
	loader host.Loader
	state  map[string]map[string]string
	closed map[string]bool
}

// errUnknownSession is the stand-in's agentd.ErrUnknownSession.
var errUnknownSession = errors.New("unknown live session")

// live refuses what agentd refuses: a nested call with no session, or one
// whose session is not live (closed, or never opened).
func (s *server) live(session string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if session == "" || s.closed[session] {
		return fmt.Errorf("%w %q", errUnknownSession, session)
	}
	return nil
}

// close ends a session: nested calls naming it are refused from now on.
func (s *server) close(session string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed == nil {
		s.closed = map[string]bool{}
	}
	s.closed[session] = true
}

func (s *server) DispatchTool(ctx context.Context, session, tool string, args map[string]any) (string, error) {
	if err := s.live(session); err != nil {
		return "", fmt.Errorf("dispatch %s: %w", tool, err)
	}
	switch tool {
	case "session_probe":
		b, err := json.Marshal(map[string]any{"session": session})
		return string(b), err
	case "native_echo":
		return "native", nil
	}
	s.mu.Lock()
	l := s.loader
	s.mu.Unlock()
	return l.Call(ctx, session, tool, args)
}

func (s *server) Facade(ctx context.Context, session, facade, method string, args []string) (string, error) {
	if err := s.live(session); err != nil {
		return "", fmt.Errorf("%s.%s: %w", facade, method, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == nil {
		s.state = map[string]map[string]string{}
	}
	switch facade + "." + method {
	case "state.set":
		if s.state[session] == nil {
			s.state[session] = map[string]string{}
		}
		s.state[session][args[0]] = args[1]
		return "", nil
	case "state.get":
		return s.state[session][args[0]], nil
	case "llm.complete":
		return "completed:" + args[0], nil
	}
	return "", host.ErrUnsupported
}

// env is one profile with a plugin host: its home, its log, its manager.
type env struct {
	t    testing.TB
	home string
	log  *syncio.Buffer
	srv  *server
	m    *host.Manager

	mu    sync.Mutex
	pids  map[int]bool
	pgids map[int]bool
}

func newHome(t testing.TB) string {
	t.Helper()
	home, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	return home
}

// hostCommand runs this test binary as a plugin host. hostEnv (and
// GORACE: a race-enabled child would otherwise sleep a second at exit) are
// set by env(1), as an operator's launcher would: a host's process starts
// with agentd's allow-list only, never its Config.Env (issue 46).
func hostCommand() []string {
	return []string{"/usr/bin/env", hostEnv + "=1", "GORACE=atexit_sleep_ms=0", os.Args[0]}
}

func hostEnvFor(home string) []string {
	// GORACE: a race-enabled child would otherwise sleep a second at exit.
	return []string{hostEnv + "=1", "GORACE=atexit_sleep_ms=0", "HOME=" + home, "PATH=" + os.Getenv("PATH"), "PROFILE_CANARY=canary-" + filepath.Base(home)}
}

// newEnv starts nothing: the manager starts its host on first use. At
// cleanup it closes the manager and proves no host it ever saw survives;
// the child's log is printed only when the test failed.
func newEnv(t testing.TB, home string, tweak func(*host.Config)) *env {
	t.Helper()
	e := &env{t: t, home: home, log: &syncio.Buffer{}, srv: &server{}, pids: map[int]bool{}, pgids: map[int]bool{}}
	cfg := host.Config{
		Profile: filepath.Base(home), Command: hostCommand(), Home: home, Env: hostEnvFor(home),
		PluginsDir: filepath.Join(home, "plugins"), Backend: e.srv, Log: e.log,
		ExtractEnv: []string{hostEnv + "=1", "HOME=" + home, "PATH=" + os.Getenv("PATH")},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	m, err := host.New(cfg)
	require.NoError(t, err)
	e.m = m
	e.srv.loader = m
	t.Cleanup(func() {
		require.NoError(t, m.Close())
		e.seePID()
		e.mu.Lock()
		defer e.mu.Unlock()
		for pid := range e.pids {
			// A host killed for its deadline just before Close may still be
			// on its way out (killed, not yet reaped): gone within a
			// deadline, never surviving.
			require.Eventually(t, func() bool { return !procgroup.Alive(pid) }, eventually, tick, "plugin host pid %d survived Close", pid)
		}
		for pgid := range e.pgids {
			require.Empty(t, procgroup.GroupMembers(pgid), "process group %d has members after Close", pgid)
		}
		if t.Failed() {
			t.Logf("plugin host log:\n%s", e.log.String())
		}
	})
	return e
}

func (e *env) seePID() {
	pid, pgid := e.m.PID(), e.m.PGID()
	e.mu.Lock()
	defer e.mu.Unlock()
	if pid > 0 {
		e.pids[pid] = true
	}
	if pgid > 0 {
		e.pgids[pgid] = true
	}
}

// call runs a tool and decodes its JSON result.
func (e *env) call(session, tool string, args map[string]any) map[string]any {
	e.t.Helper()
	out, err := e.m.Call(context.Background(), session, tool, args)
	require.NoError(e.t, err, "call %s", tool)
	e.seePID()
	var v map[string]any
	require.NoError(e.t, json.Unmarshal([]byte(out), &v), "result of %s: %q", tool, out)
	return v
}

func pidOf(v map[string]any) int {
	f, _ := v["pid"].(float64)
	return int(f)
}

func markerExists(home, name string, pid int) bool {
	_, err := os.Stat(filepath.Join(home, name+"-"+strconv.Itoa(pid)))
	return err == nil
}

const eventually = 10 * time.Second
const tick = 10 * time.Millisecond
