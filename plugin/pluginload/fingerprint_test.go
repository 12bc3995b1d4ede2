package pluginload_test

import (
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/plugin/pluginload"
)

// A fingerprint reads every file of a plugin folder: one holding a link
// or a FIFO, or more than MaxFingerprintBytes, is refused, naming the
// file, before any of it is read.
func TestFingerprintRefusesOddAndHugeFolders(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "plugin.yaml"), []byte("name: p\n"), 0o600))
	fp, err := pluginload.Fingerprint(dir)
	require.NoError(t, err)
	require.Len(t, fp, 16)

	require.NoError(t, os.Symlink("/dev/zero", filepath.Join(dir, "z.go")))
	_, err = pluginload.Fingerprint(dir)
	require.ErrorIs(t, err, pluginload.ErrNotRegular)
	require.ErrorContains(t, err, "z.go")
	require.NoError(t, os.Remove(filepath.Join(dir, "z.go")))

	f, err := os.Create(filepath.Join(dir, "big.go"))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(pluginload.MaxFingerprintBytes+1)) // sparse: no disk
	require.NoError(t, f.Close())
	_, err = pluginload.Fingerprint(dir)
	require.ErrorIs(t, err, pluginload.ErrTooLarge)
	require.ErrorContains(t, err, "big.go")
}

// DiscoverFS reads what Discover reads, from any file system, and names
// each plugin's folder on disk from base.
func TestDiscoverFS(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"plugins/a/plugin.yaml":                 {Data: []byte("name: a\n")},
		"plugins/a/a.go":                        {Data: []byte("package a\n")},
		"plugins/notaplugin/x.go":               {Data: []byte("package x\n")},
		"plugins/model-providers/m/plugin.yaml": {Data: []byte("kind: model-provider\n")},
	}
	found, err := pluginload.DiscoverFS(fsys, "plugins", "/h/plugins", nil)
	require.NoError(t, err)
	require.Len(t, found, 2)
	require.Equal(t, pluginload.Found{Manifest: pluginload.Manifest{Name: "a", Kind: "general"}, Dir: "/h/plugins/a"}, found[0])
	require.Equal(t, "/h/plugins/model-providers/m", found[1].Dir)
	require.Equal(t, "model-provider", found[1].Kind)
	fp, err := pluginload.FingerprintFS(fsys, "plugins/a")
	require.NoError(t, err)
	require.Len(t, fp, 16)
}
