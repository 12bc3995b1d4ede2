package harness

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExtendsMergesMappingsAndReplacesTheRest: a target file extending
// another gets the base's fields, its own mappings merged into the base's
// key by key, its lists and scalars in place of the base's, a null key
// removed, and {target_dir} of each file its own folder.
func TestExtendsMergesMappingsAndReplacesTheRest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	baseDir := filepath.Join(dir, "base")
	require.NoError(t, os.MkdirAll(baseDir, 0o755))
	write := func(path, text string) string {
		require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
		return path
	}
	write(filepath.Join(baseDir, "target.yaml"), `name: base
version: "1"
kind: gateway
gateway: ["{target_dir}/gw", serve, --port, "{port}"]
env:
  A: base-a
  B: base-b
secrets: [s1, s2]
llm_gateway:
  ready_path: /status
  provision: [prov]
  models_path: /models
  store:
    sqlite: "{root}/db"
`)
	over := write(filepath.Join(dir, "nodes.yaml"), `extends: base/target.yaml
name: nodes
replicas: 2
env:
  B: over-b
  C: "{target_dir}/c"
secrets: [s3]
llm_gateway:
  store: null
`)
	tg, err := LoadTarget(over)
	require.NoError(t, err)
	assert.Equal(t, "nodes", tg.Name)
	assert.Equal(t, "1", tg.Version)
	assert.Equal(t, 2, tg.Replicas)
	assert.Equal(t, filepath.Join(baseDir, "gw"), tg.Gateway[0], "{target_dir} of the base is the base's folder")
	assert.Equal(t, map[string]string{"A": "base-a", "B": "over-b", "C": filepath.Join(dir, "c")}, tg.Env)
	assert.Equal(t, []string{"s3"}, tg.Secrets, "a list replaces the base's")
	require.NotNil(t, tg.LLMGateway)
	assert.Equal(t, "/status", tg.LLMGateway.ReadyPath)
	assert.Nil(t, tg.LLMGateway.Store, "null removes the base's key")
}

// TestExtendsRefusesCyclesAndBadPaths: each bad extends is refused with
// what was wrong.
func TestExtendsRefusesCyclesAndBadPaths(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := filepath.Join(dir, "a.yaml")
	b := filepath.Join(dir, "b.yaml")
	require.NoError(t, os.WriteFile(a, []byte("extends: b.yaml\nname: a\n"), 0o644))
	require.NoError(t, os.WriteFile(b, []byte("extends: a.yaml\nname: b\n"), 0o644))
	_, err := LoadTarget(a)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "extends itself")
	missing := filepath.Join(dir, "m.yaml")
	require.NoError(t, os.WriteFile(missing, []byte("extends: nowhere.yaml\nname: m\n"), 0o644))
	_, err = LoadTarget(missing)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nowhere.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("extends: [x]\nname: bad\n"), 0o644))
	_, err = LoadTarget(bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "want the path of a target file")
}

// TestUnsupportedBackendNamesItsReason: a backend the target file says it
// does not offer is unsupported with the file's reason; a bad entry is
// refused naming it.
func TestUnsupportedBackendNamesItsReason(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "t.yaml")
	require.NoError(t, os.WriteFile(path, []byte("name: x\nstdio: [x]\nunsupported:\n  gateway: its gateway serves one profile per process\n"), 0o644))
	tg, err := LoadTarget(path)
	require.NoError(t, err)
	ok, why := tg.Supports(BackendGateway)
	assert.False(t, ok)
	assert.Equal(t, "the target does not offer the gateway backend: its gateway serves one profile per process", why)
	ok, _ = tg.Supports(BackendStdio)
	assert.True(t, ok)
	for text, want := range map[string]string{
		"name: x\nstdio: [x]\nunsupported:\n  telnet: no\n":         "unsupported.telnet: no such backend",
		"name: x\nstdio: [x]\nunsupported:\n  gateway: \" \"\n":     "unsupported.gateway: give the reason",
		"name: x\nstdio: [x]\nunsupported:\n  stdio: it has none\n": "unsupported.stdio: the target also gives the stdio backend a command",
	} {
		require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
		_, err := LoadTarget(path)
		require.Error(t, err, text)
		assert.Contains(t, err.Error(), want)
	}
}
