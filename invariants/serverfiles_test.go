package invariants

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The server's own files in the launch home: a write there by a call
// addressed to another tenant is no write-scope finding (a stray write
// beside them still is), and a secret there is nobody's: the launch
// tenant's own secret in them, which the home scan would pass as its own,
// is a shared-place finding, and the home scan leaves them alone.
func TestServerFiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSet(t)
	def, alpha := s.Get("default"), s.Get("alpha")
	globs := []string{"logs/", "auth.lock", "state.db*"}
	write(t, filepath.Join(def.Home, "logs", "server.log"), []byte("start\n"))
	before, err := HashTree(ctx, s.LaunchHome)
	require.NoError(t, err)

	// A write addressed to alpha: the server logs it and takes its lock in
	// the launch home, and strays into the launch home's SOUL.md.
	write(t, filepath.Join(def.Home, "logs", "server.log"), []byte("start\nalpha wrote\n"))
	write(t, filepath.Join(def.Home, "auth.lock"), []byte("1"))
	write(t, filepath.Join(def.Home, "SOUL.md"), []byte("stray"))
	write(t, filepath.Join(alpha.Home, "config.yaml"), []byte("x: 1\n"))
	after, err := HashTree(ctx, s.LaunchHome)
	require.NoError(t, err)
	got := WriteScopeChanges(s, "alpha", before, after, append([]string{"config.yaml"}, ServerFilePatterns(s.LaunchHome, globs)...)...)
	require.Len(t, got, 1, "%v", got)
	assert.Equal(t, filepath.Join(def.Home, "SOUL.md"), got[0].Where.Path)
	// Positive control: without the declaration the server's writes are findings.
	assert.Len(t, WriteScopeChanges(s, "alpha", before, after, "config.yaml"), 3)

	// The launch tenant's own key in a server file.
	write(t, filepath.Join(def.Home, "logs", "server.log"), []byte("key="+def.ProviderKey()+"\n"))
	server := ServerFiles(s.LaunchHome, globs)
	assert.Equal(t, []string{filepath.Join(def.Home, "auth.lock"), filepath.Join(def.Home, "logs")}, server)
	chk, err := NewChecker(s.Tenants)
	require.NoError(t, err)
	shared := chk.SharedPlaceLeaks(ctx, server)
	require.Len(t, shared, 1, "%v", shared)
	assert.Equal(t, SharedPlace, shared[0].Invariant)
	assert.Equal(t, "default", shared[0].Owner)
	// A foreign key there is the shared-place scan's, not the home scan's.
	write(t, filepath.Join(def.Home, "logs", "other.log"), []byte("key="+alpha.ProviderKey()+"\n"))
	for _, f := range chk.FileLeaks(ctx, s, server...) {
		assert.NotContains(t, f.Where.Path, filepath.Join(def.Home, "logs"), "the home scan reports a server file: %s", f)
	}
	var homeScan bool
	for _, f := range chk.FileLeaks(ctx, s) {
		homeScan = homeScan || f.Where.Path == filepath.Join(def.Home, "logs", "other.log")
	}
	assert.True(t, homeScan, "positive control: undeclared, the foreign key is the home scan's")
}
