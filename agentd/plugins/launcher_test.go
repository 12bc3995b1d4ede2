package plugins

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

// TestDefaultLauncherSandboxesTheHost runs a command under the default
// launcher (bwrap) as a plugin host would run: it sees its own home and no
// other process; with the host-shared-pidns fault it sees this test's
// process (the positive control). A configured launcher is not asked for.
func TestDefaultLauncherSandboxesTheHost(t *testing.T) {
	t.Parallel()
	if err := sandbox.Available(sandbox.Bwrap); err != nil {
		t.Skipf("bwrap cannot run here: %v", err)
	}
	root := t.TempDir()
	homes := profile.Homes{Launch: filepath.Join(root, "launch"), Managed: filepath.Join(root, "managed")}
	alpha, err := homes.Create("alpha")
	require.NoError(t, err)
	beta, err := homes.Create("beta")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(beta.File(".env"), []byte("KEY=beta-canary\n"), 0o600))
	// terminal.sandbox is the operator's (a profile's own value is ignored).
	managed := filepath.Join(homes.Managed, "config.yaml")
	require.NoError(t, os.MkdirAll(homes.Managed, 0o700))
	require.NoError(t, os.WriteFile(managed, []byte("terminal:\n  sandbox: bwrap\n"), 0o600))
	sh, err := exec.LookPath("sh")
	require.NoError(t, err)

	self := strconv.Itoa(os.Getpid())
	for _, fault := range []bool{false, true} {
		fs := faults.Set{}
		if fault {
			fs[faults.HostSharedPIDNS] = true
		}
		prefix, mode, err := DefaultLauncher(alpha, Options{Command: []string{sh}, Faults: fs})
		require.NoError(t, err)
		require.Equal(t, sandbox.Bwrap, mode)
		cmd := exec.Command(prefix[0], append(prefix[1:], sh, "-c", "ls /proc; cat "+beta.File(".env")+"; pwd")...)
		cmd.Dir = alpha.Home
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		procgroup.Prepare(cmd)
		require.NoError(t, cmd.Run(), out.String())
		lines := strings.Split(out.String(), "\n")
		require.NotContains(t, out.String(), "beta-canary", "the host sees another home")
		require.Contains(t, lines, alpha.Home, "the host runs in its home")
		if fault {
			require.Contains(t, lines, self, "positive control: with the fault the host sees this process")
		} else {
			require.NotContains(t, lines, self, "the host sees a process outside its sandbox")
		}
	}

	require.NoError(t, os.WriteFile(managed, []byte("terminal:\n  sandbox: none\n"), 0o600))
	prefix, mode, err := DefaultLauncher(alpha, Options{Command: []string{sh}})
	require.NoError(t, err)
	require.Equal(t, sandbox.None, mode)
	require.Empty(t, prefix, "mode none: the host runs as it is")
}
