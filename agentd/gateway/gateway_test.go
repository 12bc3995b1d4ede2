package gateway

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/profile"
)

func TestRoute(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]string{"/v1/chat/completions": "", "/p/beta/v1/chat/completions": "beta"} {
		got, ok := route(path)
		require.True(t, ok, path)
		require.Equal(t, want, got)
	}
	for _, bad := range []string{"/", "/v1/models", "/p/beta/v1/models", "/p/../v1/chat/completions", "/p/Beta/v1/chat/completions", "/p//v1/chat/completions"} {
		_, ok := route(bad)
		require.False(t, ok, bad)
	}
	require.Equal(t, "ab", contentText([]any{map[string]any{"type": "text", "text": "a"}, map[string]any{"text": "b"}}))
}

// launchHomes makes homes in a temporary folder, with the launch
// profile's home made.
func launchHomes(t *testing.T) profile.Homes {
	t.Helper()
	homes := profile.Homes{Launch: filepath.Join(t.TempDir(), "launch")}
	_, err := homes.Get("")
	require.NoError(t, err)
	return homes
}

func TestOneGatewayPerProfile(t *testing.T) {
	t.Parallel()
	homes := launchHomes(t)
	g1, err := New(Options{Homes: homes})
	require.NoError(t, err)
	_, err = New(Options{Homes: homes})
	require.True(t, errors.Is(err, ErrAlreadyServed), "got %v", err)
	g1.Close()
	g2, err := New(Options{Homes: homes})
	require.NoError(t, err, "the lock is released on Close")
	g2.Close()
}
