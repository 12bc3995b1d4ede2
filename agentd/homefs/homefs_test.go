package homefs_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/homefs"
)

// twoHomes makes a tenant's home (mine, and h over it) and another's, each
// with a SOUL.md that holds the home's own secret.
func twoHomes(t *testing.T) (h homefs.Home, mine, other string) {
	t.Helper()
	root := t.TempDir()
	mine, other = filepath.Join(root, "mine"), filepath.Join(root, "other")
	for _, d := range []string{mine, other} {
		require.NoError(t, os.MkdirAll(filepath.Join(d, "logs"), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(d, "SOUL.md"), []byte("secret of "+filepath.Base(d)), 0o600))
	}
	return homefs.Home{Dir: mine}, mine, other
}

func TestReadFollowsNoLink(t *testing.T) {
	t.Parallel()
	h, mine, other := twoHomes(t)
	got, err := h.ReadFile("SOUL.md")
	require.NoError(t, err)
	require.Equal(t, "secret of mine", string(got))

	cases := []struct {
		name, target string
		out          bool
	}{
		{"out.md", filepath.Join(other, "SOUL.md"), true},      // absolute, another home
		{"rel.md", "../other/SOUL.md", true},                   // relative, another home
		{"sys.md", "/etc/hostname", true},                      // a system path
		{"in.md", "SOUL.md", false},                            // stays inside: refused all the same
		{"dangling.md", filepath.Join(other, "nothing"), true}, // leaves, even dangling
		{"dangling-in.md", "nothing", false},                   // dangling, inside
		{"loop.md", "loop.md", false},                          // a loop
	}
	for _, c := range cases {
		require.NoError(t, os.Symlink(c.target, filepath.Join(mine, c.name)))
		_, err := h.ReadFile(c.name)
		require.ErrorIs(t, err, homefs.ErrLink, c.name)
		require.Equal(t, c.out, errors.Is(err, homefs.ErrLinkOut), "%s: %v", c.name, err)
		require.ErrorContains(t, err, "home file "+c.name)
		require.NotContains(t, err.Error(), "secret", "no content in the error")
	}

	// A folder on the way that is a link: refused too.
	require.NoError(t, os.Symlink(filepath.Join(other, "logs"), filepath.Join(mine, "memories")))
	_, err = h.OpenFile("memories/MEMORY.md", os.O_CREATE|os.O_WRONLY, 0o600)
	require.ErrorIs(t, err, homefs.ErrLinkOut)
	require.ErrorContains(t, err, "home file memories/MEMORY.md (at memories) is a link out of the home")
	require.NoFileExists(t, filepath.Join(other, "logs", "MEMORY.md"), "nothing made in the other home")

	// The positive control: the fault follows the link.
	leaky := homefs.Home{Dir: mine, FollowLinks: true}
	got, err = leaky.ReadFile("out.md")
	require.NoError(t, err)
	require.Equal(t, "secret of other", string(got))
}

func TestWriteReplacesALinkNeverWritesThrough(t *testing.T) {
	t.Parallel()
	h, mine, other := twoHomes(t)
	require.NoError(t, os.Symlink(filepath.Join(other, "SOUL.md"), filepath.Join(mine, "config.yaml")))
	require.NoError(t, h.WriteFileAtomic("config.yaml", []byte("mine: 1\n"), 0o600))
	st, err := os.Lstat(filepath.Join(mine, "config.yaml"))
	require.NoError(t, err)
	require.True(t, st.Mode().IsRegular(), "the link itself was replaced")
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	b, err := os.ReadFile(filepath.Join(other, "SOUL.md"))
	require.NoError(t, err)
	require.Equal(t, "secret of other", string(b), "the other home is untouched")

	// A folder link on the way: refused, nothing made over there.
	require.NoError(t, os.Symlink(filepath.Join(other, "logs"), filepath.Join(mine, "cron")))
	err = h.WriteFileAtomic("cron/jobs.json", []byte("{}"), 0o600)
	require.ErrorIs(t, err, homefs.ErrLinkOut)
	entries, err := os.ReadDir(filepath.Join(other, "logs"))
	require.NoError(t, err)
	require.Empty(t, entries)

	// Missing folders are made; the temporary file does not stay.
	require.NoError(t, h.WriteFileAtomic("cache/a/b.json", []byte("x"), 0o600))
	entries, err = os.ReadDir(filepath.Join(mine, "cache", "a"))
	require.NoError(t, err)
	require.Len(t, entries, 1)

	// The positive control: the fault writes the file the link names.
	require.NoError(t, os.Remove(filepath.Join(mine, "cron")))
	require.NoError(t, os.Symlink(filepath.Join(other, "logs"), filepath.Join(mine, "cron")))
	require.NoError(t, homefs.Home{Dir: mine, FollowLinks: true}.WriteFileAtomic("cron/jobs.json", []byte("{}"), 0o600))
	require.FileExists(t, filepath.Join(other, "logs", "jobs.json"))
}

func TestNamesStayInTheHome(t *testing.T) {
	t.Parallel()
	h, _, _ := twoHomes(t)
	for _, name := range []string{"../other/SOUL.md", "/etc/passwd", "..", "a/../../x", ""} {
		_, err := h.ReadFile(name)
		require.ErrorIs(t, err, homefs.ErrBadName, "%q", name)
		require.ErrorIs(t, h.WriteFileAtomic(name, nil, 0o600), homefs.ErrBadName, "%q", name)
		require.ErrorIs(t, h.MkdirAll(name, 0o700), homefs.ErrBadName, "%q", name)
	}
	_, err := h.ReadFile("missing")
	require.ErrorIs(t, err, fs.ErrNotExist)
}

func TestOnlyRegularFiles(t *testing.T) {
	t.Parallel()
	h, mine, _ := twoHomes(t)
	require.NoError(t, syscall.Mkfifo(filepath.Join(mine, ".env"), 0o600))
	_, err := h.ReadFile(".env") // must not hang on the FIFO
	require.ErrorIs(t, err, homefs.ErrNotRegular)
	ok, err := h.CheckFile(".env")
	require.ErrorIs(t, err, homefs.ErrNotRegular)
	require.False(t, ok)
	_, err = h.ReadFile("logs")
	require.Error(t, err, "a folder is not a file")

	ok, err = h.CheckFile("SOUL.md")
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = h.CheckFile("state.db-wal")
	require.NoError(t, err)
	require.False(t, ok, "missing is not an error")
	require.NoError(t, os.Symlink("/etc/hostname", filepath.Join(mine, "state.db")))
	_, err = h.CheckFile("state.db")
	require.ErrorIs(t, err, homefs.ErrLinkOut)
}

func TestReadDirAndRemove(t *testing.T) {
	t.Parallel()
	h, mine, other := twoHomes(t)
	entries, err := h.ReadDir(".")
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.Equal(t, "SOUL.md,logs", strings.Join(names, ","))
	require.NoError(t, os.Symlink(other, filepath.Join(mine, "plugins")))
	_, err = h.ReadDir("plugins")
	require.ErrorIs(t, err, homefs.ErrLinkOut)
	require.NoError(t, h.Remove("plugins"), "a link is removed itself")
	require.FileExists(t, filepath.Join(other, "SOUL.md"))
	require.NoError(t, h.Remove("logs"), "an empty folder")
	require.NoDirExists(t, filepath.Join(mine, "logs"))
}
