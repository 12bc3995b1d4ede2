package cli_test

import (
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	homefiles "github.com/tenantcanary/tenantcanary/agentd/homefs/hostile"
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
