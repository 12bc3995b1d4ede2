package cli_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
)

// served is a running `agentd serve` child.
type served struct {
	t       testing.TB
	cmd     *exec.Cmd
	pid     int
	port    int
	token   string
	stderr  *syncio.Buffer
	exited  chan struct{}
	waitErr error
}

var listenRE = regexp.MustCompile(`^backend listening on 127\.0\.0\.1:(\d+)$`)

func (w *world) startServe(args []string, extraEnv ...string) *served {
	w.t.Helper()
	return w.startListener(append([]string{"serve", "--host", "127.0.0.1", "--port", "0"}, args...), extraEnv...)
}

// startListener starts an agentd command that prints the ready line.
func (w *world) startListener(argv []string, extraEnv ...string) *served {
	t := w.t
	t.Helper()
	s := &served{t: t, token: "tok-" + tag(), stderr: &syncio.Buffer{}, exited: make(chan struct{})}
	cmd := exec.Command(os.Args[0], argv...)
	procgroup.Prepare(cmd)
	cmd.Env = w.env(append([]string{"AGENTD_SESSION_TOKEN=" + s.token}, extraEnv...)...)
	cmd.Dir = w.root
	cmd.Stderr = s.stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	s.cmd, s.pid = cmd, cmd.Process.Pid
	ports := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				p, _ := strconv.Atoi(m[1])
				ports <- p
			}
		}
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		_ = procgroup.Kill(s.pid)
		<-s.exited
		if t.Failed() {
			t.Logf("agentd serve %d stderr:\n%s", s.pid, s.stderr.String())
		}
	})
	select {
	case s.port = <-ports:
	case <-s.exited:
		t.Fatalf("agentd serve exited before listening (%v):\n%s", s.waitErr, s.stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("agentd serve never printed its port:\n%s", s.stderr.String())
	}
	return s
}

func (s *served) url(token string) string {
	return fmt.Sprintf("ws://127.0.0.1:%d/api/ws?token=%s", s.port, token)
}

// serveDialed starts `agentd serve` and dials one connection.
func (w *world) serveDialed() (*served, *agentd) {
	w.t.Helper()
	s := w.startServe(nil)
	return s, s.dial()
}

// serveAlphaBeta starts `agentd serve`, dials two connections and opens a
// session on each: sa in the launch profile (alpha's) on ca, sb in
// profile beta on cb.
func (w *world) serveAlphaBeta() (s *served, ca, cb *agentd, sa, sb string) {
	w.t.Helper()
	s = w.startServe(nil)
	ca, cb = s.dial(), s.dial()
	sa, _ = ca.create("")
	sb, _ = cb.create("beta")
	return s, ca, cb, sa, sb
}

// dial opens a websocket connection with the operator token and waits
// for gateway.ready.
func (s *served) dial() *agentd {
	s.t.Helper()
	return s.dialToken(s.token)
}

// dialToken is dial with token (a tenant's API_SERVER_KEY, say).
func (s *served) dialToken(token string) *agentd {
	t := s.t
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(s.url(token), nil)
	require.NoError(t, err)
	a := &agentd{t: t, change: make(chan struct{}), pid: s.pid}
	var wmu sync.Mutex
	a.write = func(line string) error {
		wmu.Lock()
		defer wmu.Unlock()
		return ws.WriteMessage(websocket.TextMessage, []byte(line))
	}
	done := make(chan struct{})
	var readErr error
	a.describe = func() string {
		return fmt.Sprintf("websocket closed (%v); server stderr:\n%s", readErr, s.stderr.String())
	}
	go func() {
		defer close(done)
		for {
			_, msg, err := ws.ReadMessage()
			if err != nil {
				readErr = err
				a.end()
				return
			}
			a.deliver(string(msg))
		}
	}()
	t.Cleanup(func() {
		_ = ws.Close()
		<-done
	})
	a.closeConn = func() {
		_ = ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
		_ = ws.Close()
		<-done
	}
	a.waitFor("gateway.ready event", func(m map[string]any) bool { return eventType(m) == "gateway.ready" })
	return a
}

// stop sends SIGTERM and requires a clean exit.
func (s *served) stop() {
	s.t.Helper()
	require.NoError(s.t, syscall.Kill(s.pid, syscall.SIGTERM))
	select {
	case <-s.exited:
	case <-time.After(60 * time.Second):
		s.t.Fatalf("agentd serve %d did not exit after SIGTERM", s.pid)
	}
	require.NoError(s.t, s.waitErr, "agentd serve exits 0 on SIGTERM; stderr:\n%s", s.stderr.String())
}
