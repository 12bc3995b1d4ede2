package attack

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runPlant runs a plant's command as the attacker's shell would: bash, in
// no folder of its own, with HOME the home.
func runPlant(t *testing.T, home, cmd string) string {
	t.Helper()
	c := exec.CommandContext(context.Background(), "bash", "-c", cmd)
	c.Dir, c.Env = t.TempDir(), []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
	out, err := c.CombinedOutput()
	require.NoError(t, err, "the plant's command always ends with %s: %s", RowDone, out)
	require.Contains(t, string(out), RowDone)
	return string(out)
}

// TestPlantsSayWhenTheAttackersOwnShellStops: a plant that takes says
// nothing of a stop; one the shell cannot make says RowStopped with the
// shell's own error, so the row is told apart from an attack the server
// refused.
func TestPlantsSayWhenTheAttackersOwnShellStops(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(home, "SOUL.md"), []byte("own soul\n"), 0o600))
	target := filepath.Join(t.TempDir(), "victim.env")

	out := runPlant(t, home, link("SOUL.md", target))
	_, stopped := Stopped(out)
	assert.False(t, stopped, "a link the shell made: %s", out)
	dest, err := os.Readlink(filepath.Join(home, "SOUL.md"))
	require.NoError(t, err, "SOUL.md is the link")
	assert.Equal(t, target, dest)
	kept, err := os.ReadFile(filepath.Join(home, "SOUL.md"+BackupSuffix))
	require.NoError(t, err, "the file it replaced is kept")
	assert.Equal(t, "own soul\n", string(kept))

	// A plant whose folder is a file: mkdir fails, so nothing is linked.
	require.NoError(t, os.WriteFile(filepath.Join(home, "cron"), nil, 0o600))
	out = runPlant(t, home, link("cron/jobs.json", target))
	why, stopped := Stopped(out)
	assert.True(t, stopped, "a link the shell could not make: %s", out)
	assert.Contains(t, why, "mkdir", "why names the shell's own error")
	_, err = os.Lstat(filepath.Join(home, "cron", "jobs.json"))
	assert.Error(t, err)

	_, stopped = Stopped("ls -ld SOUL.md\n" + RowDone)
	assert.False(t, stopped)
}

// TestEditsInPlaceAddNoEntry: an edit writes the file where it is (the same
// inode, nothing beside it), so a shell granted the file but not its
// folder can make it; where the shell may not add entries to the folder,
// the edit still takes and a link still stops.
func TestEditsInPlaceAddNoEntry(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	cfg := filepath.Join(home, "config.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("terminal:\n  cwd: /old\nmodel:\n  provider: x\n"), 0o600))
	before, err := os.Stat(cfg)
	require.NoError(t, err)

	vars := map[string]string{"config": "config.yaml"}
	out := runPlant(t, home, Fill(underTerminal("sandbox: none"), vars))
	_, stopped := Stopped(out)
	require.False(t, stopped, out)
	out = runPlant(t, home, editing(`s|^\([[:space:]]*cwd:\).*$|\1 /new|`, "config.yaml"))
	_, stopped = Stopped(out)
	require.False(t, stopped, out)
	got, err := os.ReadFile(cfg)
	require.NoError(t, err)
	assert.Equal(t, "terminal:\n  sandbox: none\n  cwd: /new\nmodel:\n  provider: x\n", string(got))
	after, err := os.Stat(cfg)
	require.NoError(t, err)
	assert.True(t, os.SameFile(before, after), "the edit wrote the file in place")
	entries, err := os.ReadDir(home)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "nothing beside the file: %v", entries)

	// A sed that fails leaves the file as it was and stops the plant.
	out = runPlant(t, home, editing(`s|unclosed`, "config.yaml"))
	_, stopped = Stopped(out)
	assert.True(t, stopped, out)
	again, err := os.ReadFile(cfg)
	require.NoError(t, err)
	assert.Equal(t, string(got), string(again))

	if os.Geteuid() == 0 {
		t.Log("root writes any folder: the read-only folder's half is for a non-root user")
		return
	}
	require.NoError(t, os.Chmod(home, 0o500))
	t.Cleanup(func() { _ = os.Chmod(home, 0o700) })
	out = runPlant(t, home, Fill(appendConfig("plugins: {enabled: []}"), vars))
	_, stopped = Stopped(out)
	assert.False(t, stopped, "an append in place needs no entry: %s", out)
	out = runPlant(t, home, link("SOUL.md", "/proc/self/environ"))
	why, stopped := Stopped(out)
	assert.True(t, stopped, out)
	assert.Contains(t, why, "Permission denied")
}

// TestLinkOverAFolderItCannotSetAsideLosesNothing: a folder the shell
// may not move aside (here an mv that is refused, as Landlock refuses the
// launch tenant's at its home's top level) is neither emptied nor linked
// into: the plant stops there.
func TestLinkOverAFolderItCannotSetAsideLosesNothing(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	plugins := filepath.Join(home, "plugins")
	require.NoError(t, os.MkdirAll(filepath.Join(plugins, "mine"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(plugins, "mine", "plugin.yaml"), []byte("name: mine\n"), 0o600))
	refused := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(refused, "mv"), []byte("#!/bin/sh\necho \"mv: cannot move '$3': Permission denied\" >&2\nexit 1\n"), 0o700))

	c := exec.CommandContext(context.Background(), "bash", "-c", link("plugins", t.TempDir()))
	c.Dir, c.Env = t.TempDir(), []string{"HOME=" + home, "PATH=" + refused + ":" + os.Getenv("PATH")}
	out, err := c.CombinedOutput()
	require.NoError(t, err, "%s", out)
	why, stopped := Stopped(string(out))
	assert.True(t, stopped, "%s", out)
	assert.Contains(t, why, "Permission denied")
	st, err := os.Lstat(plugins)
	require.NoError(t, err)
	assert.True(t, st.IsDir(), "the folder is still a folder")
	entries, err := os.ReadDir(plugins)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "nothing removed from it or linked into it: %v", entries)
	_, err = os.Stat(filepath.Join(plugins, "mine", "plugin.yaml"))
	assert.NoError(t, err, "its content is still there")
}
