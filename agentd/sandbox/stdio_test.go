package sandbox_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

// TestLaunchersHoldNoneOfTheCommandsStdio: once the command has its stdin
// and stdout, agentd's launchers (under Landlock, two of them between
// agentd and the command) hold neither. A command that closes both while
// it still runs (as a killed plugin host's are closed for it) leaves no
// reader of its stdin, so agentd's next write fails at once (a request
// never read, which it may send to the host's successor), and its stdout
// ends at once. Mode none's command runs under the subreaper launcher
// too. The command reads a line first: the write that gives it that line
// shows the pipe taking what is written while the command holds it.
func TestLaunchersHoldNoneOfTheCommandsStdio(t *testing.T) {
	t.Parallel()
	forEachMode(t, []sandbox.Mode{sandbox.None, sandbox.Landlock}, func(t *testing.T, mode sandbox.Mode) {
		home := t.TempDir()
		pol := sandbox.Policy{Mode: mode, Home: home, Dir: home, Allow: []string{home}, Self: self(t)}
		closed := filepath.Join(home, "closed")
		tree := "stdio-" + token(t)
		env := append(baseEnv(home), procgroup.MarkerVar+"="+tree)
		c, err := pol.Command([]string{"bash", "-c", "read -r line; exec 0<&- 1>&-; echo > " + closed + "; sleep 600"}, env)
		require.NoError(t, err)
		in, err := c.StdinPipe()
		require.NoError(t, err)
		out, err := c.StdoutPipe()
		require.NoError(t, err)
		procgroup.Prepare(c.Cmd)
		require.NoError(t, c.Start())
		c.Started()
		t.Cleanup(func() { // a failed check leaves the tree: end it
			for _, pid := range procgroup.Marked(tree) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		})
		_, err = in.Write([]byte("go\n"))
		require.NoError(t, err, "the command holds its stdin: the write is taken")

		// Each write fills no more than the pipe's buffer: a write that a
		// held pipe accepts keeps succeeding, and one with no reader fails.
		deadline := time.Now().Add(10 * time.Second)
		var werr error
		for time.Now().Before(deadline) {
			if _, err := os.Stat(closed); err == nil {
				if _, werr = in.Write([]byte("x")); werr != nil {
					break
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		require.True(t, errors.Is(werr, syscall.EPIPE), "a write to the stdin of a command that closed it still went somewhere (a launcher holds it): %v", werr)
		done := make(chan error, 1)
		go func() { _, err := io.ReadAll(out); done <- err }()
		select {
		case err := <-done:
			require.NoError(t, err, "stdout ends")
		case <-time.After(10 * time.Second):
			t.Fatal("the command closed its stdout, and it has not ended: a launcher holds it")
		}
		waited := make(chan struct{})
		go func() { _ = c.Wait(); close(waited) }()
		c.Stop(waited)
		require.Empty(t, procgroup.Marked(tree), "no process of the tree survives Stop")
	})
}
