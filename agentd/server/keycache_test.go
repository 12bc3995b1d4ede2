package server

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// A .env rewritten in place with a key of the same length, at once, is
// read again: its change time says so, or, where the file system's
// timestamp tick hides the write, the racy guard (a read within
// racyWindow of the file's change is never kept).
func TestKeyCacheRereadsARacyEnv(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	bp, err := f.homes.Get("b")
	require.NoError(t, err)
	for _, key := range []string{"key-aaaa", "key-bbbb", "key-cccc"} {
		// In place: same inode, same size, as a tenant's editor may.
		require.NoError(t, os.WriteFile(bp.File(".env"), []byte("K=key-1\n"+TenantKeyEnv+"="+key+"\n"), 0o600))
		name, ok := f.srv.TenantOf(key)
		require.True(t, ok, key)
		require.Equal(t, "b", name)
	}
	_, ok := f.srv.TenantOf("key-aaaa")
	require.False(t, ok, "a key rewritten away opens nothing")
}
