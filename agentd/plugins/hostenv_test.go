package plugins

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
	"github.com/tenantcanary/tenantcanary/agentd/sandbox/sandboxtest"
	"github.com/tenantcanary/tenantcanary/host"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
)

// envProbe is a plugin whose tool says what its host sees: the tenant's
// variable, the host's pid and its parent's (the host's keeper).
const envProbe = `package envprobe

import (
	"os"
	"strconv"

	"github.com/tenantcanary/tenantcanary/plugin"
)

func Register(ctx plugin.Context) error {
	return ctx.RegisterTool(plugin.Tool{Name: "envprobe_env", Handler: func(args map[string]any) (string, error) {
		return "X_TENANT_MARK=" + os.Getenv("X_TENANT_MARK") + " " + strconv.Itoa(os.Getpid()) + " " + strconv.Itoa(os.Getppid()), nil
	}})
}
`

type refusingBackend struct{}

func (refusingBackend) DispatchTool(context.Context, string, string, map[string]any) (string, error) {
	return "", errors.New("no server in this test")
}

func (refusingBackend) Facade(context.Context, string, string, string, []string) (string, error) {
	return "", errors.New("no server in this test")
}

// TestHostsEnvironmentStaysInsideTheSandbox (issue 46): under agentd's
// default launcher, a profile's variable reaches its plugins, and no
// process that starts the host from outside the sandbox (bwrap's outer
// process; the Landlock launcher's first stage and keeper) starts with it;
// with the launcher-env fault they do (the positive control). Nothing of
// the host's tree outlives Close.
func TestHostsEnvironmentStaysInsideTheSandbox(t *testing.T) {
	t.Parallel()
	for _, mode := range []sandbox.Mode{sandbox.Bwrap, sandbox.Landlock} {
		for _, fault := range []bool{false, true} {
			t.Run(string(mode)+"/fault="+strconv.FormatBool(fault), func(t *testing.T) {
				t.Parallel()
				if err := sandbox.Available(mode); err != nil {
					t.Skipf("mode %s cannot run here: %v", mode, err)
				}
				hostEnvCase(t, mode, fault)
			})
		}
	}
}

func hostEnvCase(t *testing.T, mode sandbox.Mode, fault bool) {
	root := t.TempDir()
	homes := profile.Homes{Launch: filepath.Join(root, "launch"), Managed: filepath.Join(root, "managed")}
	alpha, err := homes.Create("alpha")
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(homes.Managed, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(homes.Managed, "config.yaml"), []byte("terminal:\n  sandbox: "+string(mode)+"\n"), 0o600))
	dir := alpha.File("plugins", "envprobe")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "plugin.yaml"), []byte("name: envprobe\nversion: \"1.0\"\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "plugin.go"), []byte(envProbe), 0o600))

	self := sandboxtest.Self(t)
	command := append(append([]string{}, self...), "plugin-host")
	prefix, got, err := DefaultLauncher(alpha, Options{Command: command, Self: self})
	require.NoError(t, err)
	require.Equal(t, mode, got)
	var tag [6]byte
	_, _ = rand.Read(tag[:])
	mark := "X_TENANT_MARK=" + hex.EncodeToString(tag[:])
	log := &syncio.Buffer{}
	m, err := host.New(host.Config{
		Profile: "alpha", Command: append(prefix, command...), Home: alpha.Home,
		Env:             []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + alpha.Home, mark},
		OwnPIDNamespace: mode == sandbox.Bwrap, EnvOutside: fault,
		PluginsDir: alpha.File("plugins"), Backend: refusingBackend{}, Log: log,
	})
	require.NoError(t, err)
	var tree []int
	t.Cleanup(func() {
		require.NoError(t, m.Close())
		for _, pid := range tree {
			// Close kills the tree; bwrap's namespace empties as the
			// kernel reaps it (as host's own tests wait for it).
			require.Eventually(t, func() bool { return !procgroup.Alive(pid) }, 10*time.Second, 10*time.Millisecond,
				"pid %d of the host's tree survived Close", pid)
		}
		if t.Failed() {
			t.Logf("plugin host log:\n%s", log.String())
		}
	})
	out, err := m.Call(context.Background(), "s", "envprobe_env", nil)
	require.NoError(t, err)
	f := strings.Fields(out)
	require.Len(t, f, 3, out)
	require.Equal(t, mark, f[0], "(a) the plugin sees the profile's environment")

	launcher := m.PGID()
	tree = append([]int{launcher}, procgroup.Descendants(launcher)...)
	outside, want := procgroup.SameMountNS(tree), 1 // bwrap's outer process
	if mode == sandbox.Landlock {
		var launchers []int
		for _, pid := range outside {
			if s := strconv.Itoa(pid); s != f[1] && s != f[2] { // the host and its keeper, restricted
				launchers = append(launchers, pid)
			}
		}
		outside, want = launchers, 2 // the first stage and the keeper
	}
	require.Len(t, outside, want, "the programs outside the sandbox, of the tree %v", tree)
	var carrying []int
	for _, pid := range outside {
		for _, kv := range procgroup.Environ(pid) {
			if kv == mark {
				carrying = append(carrying, pid)
			}
		}
	}
	if fault {
		require.NotEmpty(t, carrying, "(c) positive control: with the launcher-env fault the host's launcher starts with the profile's variable")
		return
	}
	require.Empty(t, carrying, "(b) a program outside the sandbox started with the profile's variable")
}
