package gateway

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/homefs"
	"github.com/tenantcanary/tenantcanary/agentd/homefs/hostile"
)

// A profile's gateway.lock that is a link into another home is refused
// (nothing written there) without stopping the gateway of the others.
func TestGatewayLockLinkRefused(t *testing.T) {
	t.Parallel()
	homes := launchHomes(t)
	beta := filepath.Join(homes.Root(), "beta")
	require.NoError(t, os.MkdirAll(beta, 0o700))
	victim := filepath.Join(homes.Launch, "SOUL.md")
	require.NoError(t, os.WriteFile(victim, []byte("launch soul"), 0o600))
	require.NoError(t, os.Symlink(victim, filepath.Join(beta, "gateway.lock")))

	g, err := New(Options{Homes: homes})
	require.NoError(t, err, "the launch profile is served")
	defer g.Close()
	p, err := homes.Get("beta")
	require.NoError(t, err)
	require.ErrorIs(t, g.lock(p), homefs.ErrLinkOut)
	b, err := os.ReadFile(victim)
	require.NoError(t, err)
	require.Equal(t, "launch soul", string(b), "the pid was not written through the link")
}

// A gateway.lock that is a FIFO, a folder or a socket is refused the same
// way: at once, that profile alone.
func TestGatewayLockSpecialFileRefused(t *testing.T) {
	for _, k := range []hostile.Kind{hostile.FIFO, hostile.Dir, hostile.Socket} {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			homes := launchHomes(t)
			beta := filepath.Join(homes.Root(), "beta")
			hostile.Plant(t, filepath.Join(beta, "gateway.lock"), k)
			g, err := New(Options{Homes: homes})
			require.NoError(t, err, "the launch profile is served")
			defer g.Close()
			p, err := homes.Get("beta")
			require.NoError(t, err)
			require.Error(t, g.lock(p))
		})
	}
}
