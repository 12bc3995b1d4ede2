package cli_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	homefiles "github.com/tenantcanary/tenantcanary/agentd/homefs/hostile"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

// TestHostileEnvLive: on a live `agentd serve`, beta's .env is a FIFO (as
// beta's own terminal can make it). alpha connects with its tenant
// credential, which the server looks up over every profile's .env: the
// connect is answered at once, beta's own session.create is refused at
// once, and the server stops on SIGTERM. With home-special-files seeded
// the lookup opens beta's FIFO blocking: alpha's connect hangs past its
// handshake deadline (the positive control), until a writer frees it.
func TestHostileEnvLive(t *testing.T) {
	t.Parallel()
	defendedAndSeeded(t, "home-special-files", func(t *testing.T, seeded bool, env []string) {
		w, alpha, beta := alphaBetaWorld(t)
		writeFile(t, filepath.Join(alpha.home, ".env"), "TENANT_PROVIDER_KEY="+alpha.key+"\nAPI_SERVER_KEY=tenant-"+alpha.key+"\n")
		fifo := filepath.Join(beta.home, ".env")
		homefiles.Plant(t, fifo, homefiles.FIFO)
		s := w.startServe(nil, env...)

		dialer := websocket.Dialer{HandshakeTimeout: 3 * time.Second}
		ws, _, err := dialer.Dial(s.url("tenant-"+alpha.key), nil)
		if seeded {
			require.Error(t, err, "the fault's credential lookup blocks on beta's FIFO: alpha's connect hangs")
			var ne net.Error
			require.True(t, errors.As(err, &ne) && ne.Timeout(), "a handshake timeout, not a refusal: %v", err)
			for i := 0; i < 100 && !homefiles.Release(fifo); i++ {
				time.Sleep(20 * time.Millisecond) // the lookup is on its way into open
			}
			s.stop()
			return
		}
		require.NoError(t, err, "alpha connects beside beta's FIFO .env")
		require.NoError(t, ws.Close())

		c := s.dial()
		done := make(chan map[string]any, 1)
		go func() { done <- c.call("session.create", map[string]any{"profile": beta.profile}) }()
		select {
		case r := <-done:
			require.NotNil(t, r["error"], "beta's FIFO .env is refused: %v", r)
			require.Contains(t, r["error"].(map[string]any)["message"], "not a regular file")
		case <-time.After(10 * time.Second):
			t.Fatal("beta's session.create did not return beside its FIFO .env")
		}
		s.stop()
	})
}

// TestHostileJobsTickLive: `agentd cron tick` over alpha, whose job is
// due, and beta, whose cron/jobs.json is a FIFO. The tick runs alpha's
// job, reports beta's file refused, and exits. With home-special-files
// seeded the tick opens beta's FIFO blocking and never ends: the test
// kills it at its deadline (the positive control).
func TestHostileJobsTickLive(t *testing.T) {
	t.Parallel()
	defendedAndSeeded(t, "home-special-files", func(t *testing.T, seeded bool, env []string) {
		w, _, beta := alphaBetaWorld(t)
		out, stderr, code := w.run("cron", "create", "--name", "a-job", "--prompt", "p", "--every", "2h")
		require.Equal(t, 0, code, stderr)
		job := strings.TrimSpace(out)
		_, stderr, code = w.run("cron", "trigger", job)
		require.Equal(t, 0, code, stderr)
		homefiles.Plant(t, filepath.Join(beta.home, "cron", "jobs.json"), homefiles.FIFO)

		deadline := 30 * time.Second
		if seeded {
			deadline = 5 * time.Second // a tick blocked on the FIFO never ends: no need to wait longer
		}
		out, stderr, ended := w.runWithin(deadline, env, "cron", "tick")
		if seeded {
			require.False(t, ended, "the fault's tick blocks on beta's FIFO jobs.json; stdout:\n%s", out)
			return
		}
		require.True(t, ended, "the tick ended beside beta's FIFO jobs.json; stderr:\n%s", stderr)
		require.Contains(t, out, job+"\t", "alpha's job ran")
		require.Contains(t, out, "home file cron/jobs.json: not a regular file", "beta's refusal names the file and the rule")
	})
}

// runWithin runs one agentd command with env added until it exits or d
// passes (its process group is then killed): ended says which.
func (w *world) runWithin(d time.Duration, env []string, args ...string) (stdout, stderr string, ended bool) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := procgroup.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = w.env(env...)
	cmd.Dir = w.root
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	_ = cmd.Run() // a failed job exits 1: what it printed says more
	return o.String(), e.String(), ctx.Err() == nil
}
