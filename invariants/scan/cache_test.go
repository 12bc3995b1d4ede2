package scan

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFileCacheRescansOnlyWhatChanged: a tree scanned again gives the
// same hits, reading only the files written since (a write of the same
// size included), and a matcher with other patterns does not reuse them.
func TestFileCacheRescansOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.txt"), filepath.Join(dir, "sub", "b.txt")
	require.NoError(t, os.MkdirAll(filepath.Dir(b), 0o700))
	require.NoError(t, os.WriteFile(a, []byte("x canary-alpha-0123456789 x"), 0o600))
	require.NoError(t, os.WriteFile(b, []byte("nothing to see here at all.."), 0o600))
	m, err := Compile([]Pattern{{Owner: "alpha", Kind: "k", Value: "canary-alpha-0123456789"}, {Owner: "beta", Kind: "k", Value: "canary-beta-98765432100"}})
	require.NoError(t, err)
	fc := NewFileCache()
	fc.settle = 0 // the files were written just now (TestFileCacheKeepsNoFreshFile)
	cm := m.WithCache(fc)
	owners := func(r Report) map[string]string {
		out := map[string]string{}
		for _, h := range r.Hits {
			out[filepath.Base(h.Path)] = h.Pattern.Owner
		}
		return out
	}
	ctx := context.Background()
	r := cm.Tree(ctx, dir)
	require.Equal(t, map[string]string{"a.txt": "alpha"}, owners(r))
	require.Equal(t, 2, fc.scans)

	// Nothing changed: nothing read, the same hits.
	r = cm.Tree(ctx, dir)
	require.Equal(t, map[string]string{"a.txt": "alpha"}, owners(r))
	require.Equal(t, 2, fc.scans)

	// b rewritten to the same size: read again, its new hit found; a not.
	require.NoError(t, os.WriteFile(b, []byte("now canary-beta-98765432100"), 0o600))
	r = cm.Tree(ctx, dir)
	require.Equal(t, map[string]string{"a.txt": "alpha", "b.txt": "beta"}, owners(r))
	require.Equal(t, 3, fc.scans)
	require.Equal(t, owners(m.Tree(ctx, dir)), owners(r), "the cached scan differs from a fresh one")

	// Another matcher (a canary minted since) reads every file again.
	m2, err := Compile([]Pattern{{Owner: "alpha", Kind: "k", Value: "canary-alpha-0123456789"}, {Owner: "gamma", Kind: "k", Value: "canary-gamma-555555555"}})
	require.NoError(t, err)
	r = m2.WithCache(fc).Tree(ctx, dir)
	require.Equal(t, map[string]string{"a.txt": "alpha"}, owners(r))
	require.Equal(t, 5, fc.scans)
}

// TestFileCacheKeepsNoFreshFile: a file changed just before its scan is
// read again at the next (a write of the same size in the same clock tick
// would keep its times), and kept once it has settled.
func TestFileCacheKeepsNoFreshFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := filepath.Join(dir, "a.txt")
	require.NoError(t, os.WriteFile(a, []byte("x canary-alpha-0123456789 x"), 0o600))
	m, err := Compile([]Pattern{{Owner: "alpha", Kind: "k", Value: "canary-alpha-0123456789"}})
	require.NoError(t, err)
	fc := NewFileCache()
	fc.settle = time.Hour // every file here is fresh
	cm := m.WithCache(fc)
	ctx := context.Background()
	for range 2 {
		require.Len(t, cm.Tree(ctx, dir).Hits, 1)
	}
	require.Equal(t, 2, fc.scans, "a fresh file was served from the cache")
	fc.settle = 0
	for range 2 {
		require.Len(t, cm.Tree(ctx, dir).Hits, 1)
	}
	require.Equal(t, 3, fc.scans, "a settled file was read again")
}
