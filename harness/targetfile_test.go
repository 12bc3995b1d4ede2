package harness

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/tenants"
)

// TestTargetDirFillsEveryString: {target_dir} is the target file's own
// folder in every string of the file (commands, env, dialect hooks),
// also when the folder's name is one YAML would read otherwise.
func TestTargetDirFillsEveryString(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), `odd: "dir" #1`)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	path := filepath.Join(dir, "target.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
name: x
stdio: ["{target_dir}/bin/server", tui]
env: {PLUGINS: "{target_dir}/plugins", PLAIN: "no placeholder"}
dialect:
  methods:
    profiles.create: {hook: ["{target_dir}/hooks/create.sh", "{name}"]}
`), 0o644))
	tg, err := LoadTarget(path)
	require.NoError(t, err)
	assert.Equal(t, []string{dir + "/bin/server", "tui"}, tg.Stdio)
	assert.Equal(t, dir+"/plugins", tg.Env["PLUGINS"])
	assert.Equal(t, "no placeholder", tg.Env["PLAIN"])
	assert.Equal(t, []string{dir + "/hooks/create.sh", "{name}"}, tg.Dialect.Methods["profiles.create"].Hook)

	// A relative path to the file gives the same absolute folder.
	wd, err := os.Getwd()
	require.NoError(t, err)
	rel, err := filepath.Rel(wd, path)
	require.NoError(t, err)
	tg, err = LoadTarget(rel)
	require.NoError(t, err)
	assert.Equal(t, dir+"/bin/server", tg.Stdio[0])
}

// TestReadyTimeout: ready_timeout lengthens (or shortens) the wait for a
// backend's ready line; a bare number or a negative one is refused with
// the line it stands on.
func TestReadyTimeout(t *testing.T) {
	t.Parallel()
	tg, err := LoadTarget(writeFile(t, "name: x\nstdio: [a]\nready_timeout: 3m\n"))
	require.NoError(t, err)
	assert.Equal(t, 3*time.Minute, tg.ReadyWithin(DefaultReadyTimeout))
	tg, err = LoadTarget(writeFile(t, "name: x\nstdio: [a]\n"))
	require.NoError(t, err)
	assert.Equal(t, DefaultReadyTimeout, tg.ReadyWithin(DefaultReadyTimeout))
	for _, bad := range []string{"90", "-1s", "soon"} {
		_, err = LoadTarget(writeFile(t, "name: x\nstdio: [a]\nready_timeout: "+bad+"\n"))
		assert.ErrorContains(t, err, "line 3: \""+bad+"\" is not a duration", bad)
	}
}

// TestEscapeGrace: escape_grace is how long a target may take to end the
// processes an event ends; a target file without one gets the default,
// the embedded agentd (which ends them before it answers) its own.
func TestEscapeGrace(t *testing.T) {
	t.Parallel()
	tg, err := LoadTarget(writeFile(t, "name: x\nstdio: [a]\nescape_grace: 40s\n"))
	require.NoError(t, err)
	assert.Equal(t, 40*time.Second, tg.EscapeWithin())
	tg, err = LoadTarget(writeFile(t, "name: x\nstdio: [a]\n"))
	require.NoError(t, err)
	assert.Equal(t, DefaultEscapeGrace, tg.EscapeWithin())
	emb := AgentdTarget("agentd")
	assert.Equal(t, AgentdEscapeGrace, emb.EscapeWithin())
	_, err = LoadTarget(writeFile(t, "name: x\nstdio: [a]\nescape_grace: 3\n"))
	assert.ErrorContains(t, err, "line 3: \"3\" is not a duration")
}

// TestHooksGetTheServe: while a serve backend is up, a hook's environment
// has its URL, host, port and token; before it is noted, none of them.
func TestHooksGetTheServe(t *testing.T) {
	t.Parallel()
	box, err := NewSandbox(context.Background(), t.TempDir(), echoTarget("sh", "-c", `echo "$AGENTD_HOME/profiles"`),
		SandboxOptions{Tenants: tenants.Options{Names: []string{"default"}, NoProviders: true}})
	require.NoError(t, err)
	defer func() { require.NoError(t, box.Close()) }()
	run := box.HookRunner()
	hook := []string{"sh", "-c", `for v in ` + strings.Join(HookServeVars, " ") + `; do eval "echo $v=\${$v:-unset}"; done`}

	out, err := run(context.Background(), "profiles.create", map[string]any{}, hook, nil)
	require.NoError(t, err)
	assert.Contains(t, out, "TARGET_URL=unset")
	assert.Contains(t, out, "TARGET_TOKEN=unset")

	box.NoteServe("http://127.0.0.1:4711", "tok-abc")
	out, err = run(context.Background(), "profiles.create", map[string]any{}, hook, nil)
	require.NoError(t, err)
	for _, want := range []string{"TARGET_URL=http://127.0.0.1:4711", "TARGET_HOST=127.0.0.1", "TARGET_PORT=4711", "TARGET_TOKEN=tok-abc"} {
		assert.Contains(t, out, want)
	}
	box.NoteServe("", "")
	out, err = run(context.Background(), "profiles.create", map[string]any{}, hook, nil)
	require.NoError(t, err)
	assert.Contains(t, out, "TARGET_PORT=unset", "a stopped server is forgotten")
}

// TestMergeManagedKeepsWhatIsThere: a scenario's operator settings merge
// into the managed scope as it stands, the planted operator canary kept; a
// target without a managed scope is left alone.
func TestMergeManagedKeepsWhatIsThere(t *testing.T) {
	t.Parallel()
	tg := echoTarget("sh", "-c", `echo "$AGENTD_HOME/profiles"`)
	tg.Env = map[string]string{"AGENTD_MANAGED_DIR": "{root}/managed"}
	tg.ManagedDir = "{root}/managed"
	tg.ManagedConfig = "{root}/managed/config.yaml"
	tg = tg.WithManaged(map[string]any{"terminal": map[string]any{"sandbox": "bwrap"}})
	box, err := NewSandbox(context.Background(), t.TempDir(), tg, SandboxOptions{Tenants: tenants.Options{Names: []string{"default"}, NoProviders: true}})
	require.NoError(t, err)
	defer func() { require.NoError(t, box.Close()) }()
	ok, err := box.MergeManaged(map[string]any{"plugins": map[string]any{"host": map[string]any{"call_timeout": "5s"}}})
	require.NoError(t, err)
	require.True(t, ok)
	data, err := os.ReadFile(filepath.Join(box.Root, "managed", "config.yaml"))
	require.NoError(t, err)
	for _, want := range []string{"sandbox: bwrap", "call_timeout: 5s", box.Operator["managed_secret"]} {
		assert.Contains(t, string(data), want)
	}

	plain, err := NewSandbox(context.Background(), t.TempDir(), echoTarget("sh", "-c", `echo "$AGENTD_HOME/profiles"`),
		SandboxOptions{Tenants: tenants.Options{Names: []string{"default"}, NoProviders: true}})
	require.NoError(t, err)
	defer func() { require.NoError(t, plain.Close()) }()
	ok, err = plain.MergeManaged(map[string]any{"x": 1})
	require.NoError(t, err)
	assert.False(t, ok, "no managed scope: nothing written")
}
