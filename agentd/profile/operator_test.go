package profile

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOperatorOnlyKeysOfAProfilesOwnConfigAreIgnored: every key of the
// OperatorOnly table set in a profile's own config.yaml is ignored by every
// reader (and listed), the managed scope's value or the default applies,
// and the profile's other keys stay its own.
func TestOperatorOnlyKeysOfAProfilesOwnConfigAreIgnored(t *testing.T) {
	t.Parallel()
	h, p := testProfile(t, "alpha")
	own := `model:
  default: own-model
plugins:
  enabled: [probe]
  isolation: in_process
  host:
    launcher: [/bin/sh, /x/l.sh]
    call_timeout: 10m
    memory_limit: off
    processes_limit: 5
terminal:
  cwd: /work/own
  sandbox: none
  network: host
  workdir_roots: [/]
`
	write(t, p.File("config.yaml"), own)
	cfg, err := p.LoadConfig()
	require.NoError(t, err)
	require.Empty(t, cfg.Plugins.Isolation)
	require.Empty(t, cfg.Plugins.Host.Launcher)
	require.Empty(t, cfg.Terminal.Sandbox)
	require.Nil(t, cfg.Raw["plugins"].(map[string]any)["host"])
	require.NotContains(t, cfg.Raw["terminal"], "network")
	require.NotContains(t, cfg.Raw["terminal"], "workdir_roots")
	require.Equal(t, "own-model", cfg.Model.Default, "a tenant's own keys stay its own")
	require.Equal(t, "/work/own", cfg.Terminal.Cwd)
	require.Equal(t, []string{"probe"}, cfg.Plugins.Enabled)
	var keys []string
	for _, k := range cfg.Ignored {
		require.Equal(t, p.File("config.yaml"), k.File)
		require.Equal(t, "alpha", k.Profile)
		keys = append(keys, k.Key)
	}
	var table []string
	for _, k := range OperatorOnly {
		table = append(table, k.Key)
	}
	require.Equal(t, table, keys, "every row of the table was set, and each is ignored")
	set, err := p.TerminalSandbox()
	require.NoError(t, err)
	require.Equal(t, "auto", string(set.Mode), "the default applies")

	write(t, filepath.Join(h.Managed, "config.yaml"), "plugins:\n  host:\n    launcher: [runner]\nterminal:\n  sandbox: bwrap\n")
	cfg, err = p.LoadConfig()
	require.NoError(t, err)
	require.Equal(t, []string{"runner"}, []string(cfg.Plugins.Host.Launcher), "the managed value applies")
	require.Equal(t, "bwrap", cfg.Terminal.Sandbox)
	data, err := os.ReadFile(p.File("config.yaml"))
	require.NoError(t, err)
	require.Equal(t, own, string(data), "the file is ignored, never rewritten")

	p.OwnOperatorKeys = true
	cfg, err = p.LoadConfig()
	require.NoError(t, err)
	require.Equal(t, "in_process", cfg.Plugins.Isolation, "positive control: an owner's own keys are read")
	require.Empty(t, cfg.Ignored)
	require.Equal(t, []string{"runner"}, []string(cfg.Plugins.Host.Launcher), "the managed scope still wins")

	require.True(t, IsOperatorKey("plugins.host.open_files_limit"))
	require.True(t, IsOperatorKey("plugins.host.some_new_limit"))
	require.False(t, IsOperatorKey("plugins.hostile"))
	require.False(t, IsOperatorKey("terminal.cwd"))
}

func TestNamesAndSlugsAreAnAllowList(t *testing.T) {
	t.Parallel()
	h := testHomes(t)
	long := "a"
	for len(long) < 65 {
		long += "b"
	}
	for _, bad := range []string{"", "../x", "a/b", ".deleted-x", "Alpha", long, "x y", "-x", "x\x00"} {
		require.ErrorIs(t, ValidName(bad), ErrBadName, "%q", bad)
		_, err := h.Create(bad)
		require.ErrorIs(t, err, ErrBadName, "create %q", bad)
		if bad != "" {
			_, err = h.Get(bad)
			require.ErrorIs(t, err, ErrUnknownProfile, "get %q", bad)
		}
		require.ErrorIs(t, ValidSlug(bad), ErrBadSlug, "slug %q", bad)
	}
	require.NoError(t, ValidName(long[:64]))
	require.NoError(t, ValidSlug(long[:64]), "a slug of 64 is the longest")
	require.NoError(t, ValidSlug("canary_alpha_2"))
	require.NoDirExists(t, h.Root(), "a bad name made something")
}

// TestDeleteSetsTheHomeAsideAndCreateNeverReuses: a deleted home is renamed
// aside (hidden from List and Get) and then removed; create makes a fresh
// home and refuses a path where anything is.
func TestDeleteSetsTheHomeAsideAndCreateNeverReuses(t *testing.T) {
	t.Parallel()
	h, p := testProfile(t, "alpha")
	write(t, p.File(".env"), "K=old-canary\n")
	aside, err := h.SetAside("alpha")
	require.NoError(t, err)
	require.Equal(t, h.Root(), filepath.Dir(aside))
	list, err := h.List()
	require.NoError(t, err)
	require.Len(t, list, 1, "an aside home is no profile")
	_, err = h.Get(filepath.Base(aside))
	require.ErrorIs(t, err, ErrUnknownProfile)
	_, err = h.Get("alpha")
	require.ErrorIs(t, err, ErrUnknownProfile)

	again, err := h.Create("alpha")
	require.NoError(t, err)
	data, err := os.ReadFile(again.File(".env"))
	require.NoError(t, err)
	require.Empty(t, data, "the new home holds nothing of the old")
	require.NoError(t, h.RemoveAside(aside))
	require.NoDirExists(t, aside)
	require.Error(t, h.RemoveAside(again.Home), "only an aside home is removed so")

	_, err = h.Create("alpha")
	require.ErrorIs(t, err, ErrProfileExists)
	write(t, filepath.Join(h.Root(), "beta"), "a file where the home would go\n")
	_, err = h.Create("beta")
	require.ErrorIs(t, err, ErrProfileExists, "create never reuses a path")
	require.NoError(t, h.Delete("alpha"))
	entries, err := os.ReadDir(h.Root())
	require.NoError(t, err)
	require.Len(t, entries, 1, "only beta's file is left: %v", entries)
}
