// Package golden checks a file generated from the code (a doc rendered from
// a table) against what the code renders now, for the tests that keep such
// files current.
package golden

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Check fails t unless the file name, below root, holds want; with update
// it first writes want there. The failure names the file and regen, the
// command that rewrites it.
func Check(t testing.TB, root, name, want string, update bool, regen string) {
	t.Helper()
	path := filepath.Join(root, name)
	if update {
		require.NoError(t, os.WriteFile(path, []byte(want), 0o644))
	}
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, want, string(got), "%s is stale: run %s", name, regen)
}
