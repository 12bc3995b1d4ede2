package harness

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/tenants"
)

func echoTarget(profileRoot ...string) Target {
	return Target{Name: "echo", Stdio: []string{"cat"}, ProfileRoot: profileRoot, Files: true, Layout: tenants.AgentdLayout()}
}

// Before anything is written, the target says where its profiles resolve;
// a place outside the sandbox is refused and nothing is left behind.
func TestSandboxRefusesAProfileRootOutsideIt(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	_, err := NewSandbox(context.Background(), root, echoTarget("echo", "/etc/agentd/profiles"), SandboxOptions{Tenants: tenants.Options{NoProviders: true}})
	require.ErrorIs(t, err, ErrEscapedSandbox)
	assert.NoFileExists(t, filepath.Join(root, "home", ".agentd", "config.yaml"), "no home was written")

	_, err = NewSandbox(context.Background(), t.TempDir(), echoTarget("sh", "-c", "echo relative/path"), SandboxOptions{Tenants: tenants.Options{NoProviders: true}})
	require.ErrorContains(t, err, "not an absolute path")

	_, err = NewSandbox(context.Background(), t.TempDir(), echoTarget("false"), SandboxOptions{Tenants: tenants.Options{NoProviders: true}})
	require.ErrorContains(t, err, "profile root")
}

// The profile root check reads the target's answer under the hermetic
// environment: HOME is the sandbox's, so a HOME-anchored target passes, and
// the homes are written only then.
func TestSandboxWritesHomesOnceTheRootIsInside(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	box, err := NewSandbox(context.Background(), root, echoTarget("sh", "-c", `echo "$AGENTD_HOME/profiles"`),
		SandboxOptions{Tenants: tenants.Options{Names: []string{"default", "alpha"}, NoProviders: true}})
	require.NoError(t, err)
	defer func() { require.NoError(t, box.Close()) }()
	assert.FileExists(t, filepath.Join(box.Set.LaunchHome, "config.yaml"))
	assert.FileExists(t, filepath.Join(box.Set.LaunchHome, "profiles", "alpha", ".env"))
	env := box.Env(nil)
	assert.Contains(t, env, "HOME="+box.Set.Home)
	for _, kv := range env {
		assert.NotContains(t, kv, os.Getenv("HOME")+"/", "the real home leaks into %s", kv)
	}
}

// A target's managed scope is written inside the sandbox before any of its
// processes starts, and a managed folder outside it is refused.
func TestSandboxWritesTheManagedScope(t *testing.T) {
	t.Parallel()
	tg := echoTarget("sh", "-c", `cat "$AGENTD_MANAGED_DIR/config.yaml" >&2; echo "$AGENTD_HOME/profiles"`)
	tg.Env = map[string]string{"AGENTD_MANAGED_DIR": "{root}/managed"}
	tg.ManagedDir = "{root}/managed"
	tg = tg.WithManaged(map[string]any{"terminal": map[string]any{"sandbox": "none"}})
	box, err := NewSandbox(context.Background(), t.TempDir(), tg, SandboxOptions{Tenants: tenants.Options{Names: []string{"default"}, NoProviders: true}})
	require.NoError(t, err)
	defer func() { require.NoError(t, box.Close()) }()
	data, err := os.ReadFile(filepath.Join(box.Root, "managed", "config.yaml"))
	require.NoError(t, err)
	assert.Equal(t, "terminal:\n    sandbox: none\n", string(data))
	assert.Contains(t, box.Procs()[0].Output(), "sandbox: none", "the target's first process already saw it")

	bad := echoTarget("true")
	bad.Managed = map[string]any{"x": 1}
	bad.ManagedDir = "/etc/agentd"
	_, err = NewSandbox(context.Background(), t.TempDir(), bad, SandboxOptions{Tenants: tenants.Options{NoProviders: true}})
	require.ErrorContains(t, err, "managed needs managed_dir inside the sandbox")
}
