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
