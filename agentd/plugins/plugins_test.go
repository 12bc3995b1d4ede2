package plugins

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/agent"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/scope"
)

func TestNoPluginsMeansBuiltinsOnlyAndNoLoader(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	sc, err := scope.Open(context.Background(), profile.Profile{Name: "p", Home: home}, nil)
	require.NoError(t, err)
	defer sc.Close()
	has := func() bool {
		t.Helper()
		ok, err := HasPlugins(sc.Profile.FS(), "plugins")
		require.NoError(t, err)
		return ok
	}
	require.False(t, has())
	require.NoError(t, os.MkdirAll(filepath.Join(home, "plugins", "not-a-plugin"), 0o700))
	require.False(t, has(), "a folder without plugin.yaml is not a plugin")

	reg, err := Registry(context.Background(), sc, []agent.Tool{agent.TerminalTool{}}, Options{})
	require.NoError(t, err)
	require.Len(t, reg.Specs(), 1)
	loader, _, err := Loader(sc, Options{})
	require.NoError(t, err)
	require.Nil(t, loader, "nothing is loaded (and no host started) for a profile without plugins")

	require.NoError(t, os.WriteFile(filepath.Join(home, "plugins", "not-a-plugin", "plugin.yaml"), []byte("name: x\n"), 0o600))
	require.True(t, has())
}
