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
	"os/exec"
	"strconv"

	"github.com/tenantcanary/tenantcanary/plugin"
)

func Register(ctx plugin.Context) error {
	if err := ctx.RegisterTool(plugin.Tool{Name: "envprobe_env", Handler: func(args map[string]any) (string, error) {
		return "X_TENANT_MARK=" + os.Getenv("X_TENANT_MARK") + " " + strconv.Itoa(os.Getpid()) + " " + strconv.Itoa(os.Getppid()), nil
	}}); err != nil {
		return err
	}
	// A program the plugin starts, with the profile's environment.
	return ctx.RegisterTool(plugin.Tool{Name: "envprobe_spawn", Handler: func(args map[string]any) (string, error) {
		out, err := exec.Command("true").CombinedOutput()
		return string(out), err
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
// with the launcher-env fault they do (the positive control). The same
// for a profile's LD_PRELOAD: only what runs in the sandbox loads it.
// Nothing of the host's tree outlives Close.
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
			t.Run(string(mode)+"/preload/fault="+strconv.FormatBool(fault), func(t *testing.T) {
				t.Parallel()
				if err := sandbox.Available(mode); err != nil {
					t.Skipf("mode %s cannot run here: %v", mode, err)
				}
				hostPreloadCase(t, mode, fault)
			})
		}
	}
}

// hostEnvCase: the profile's X_TENANT_MARK reaches the plugin and, but
// with the fault, none of the host's launchers.
func hostEnvCase(t *testing.T, mode sandbox.Mode, fault bool) {
	var tag [6]byte
	_, _ = rand.Read(tag[:])
	mark := "X_TENANT_MARK=" + hex.EncodeToString(tag[:])
	m, tree := newProbeHost(t, mode, fault, func(string) []string { return []string{mark} })
	out, err := m.Call(context.Background(), "s", "envprobe_env", nil)
	require.NoError(t, err)
	f := strings.Fields(out)
	require.Len(t, f, 3, out)
	require.Equal(t, mark, f[0], "(a) the plugin sees the profile's environment")

	launcher := m.PGID()
	*tree = append([]int{launcher}, procgroup.Descendants(launcher)...)
	outside, want := procgroup.SameMountNS(*tree), 1 // bwrap's outer process
	if mode == sandbox.Landlock {
		var launchers []int
		for _, pid := range outside {
			if s := strconv.Itoa(pid); s != f[1] && s != f[2] { // the host and its keeper, restricted
				launchers = append(launchers, pid)
			}
		}
		outside, want = launchers, 2 // the first stage and the keeper
	}
	require.Len(t, outside, want, "the programs outside the sandbox, of the tree %v", *tree)
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

// hostPreloadCase: a profile's LD_PRELOAD is loaded by what its plugins
// start, in the sandbox, and by no program outside it; with the
// launcher-env fault one outside loads it (the positive control).
func hostPreloadCase(t *testing.T, mode sandbox.Mode, fault bool) {
	var log string
	m, tree := newProbeHost(t, mode, fault, func(home string) []string {
		so, l := sandboxtest.Preload(t, home)
		log = l
		return []string{"LD_PRELOAD=" + so}
	})
	_, err := m.Call(context.Background(), "s", "envprobe_spawn", nil)
	require.NoError(t, err)
	*tree = append([]int{m.PGID()}, procgroup.Descendants(m.PGID())...)
	loads := sandboxtest.Loads(t, log)
	var inside, outside []sandboxtest.Loaded
	for _, l := range loads {
		if l.Outside {
			outside = append(outside, l)
			*tree = append(*tree, l.Pid) // in our PID namespace: Close must leave it gone
		} else {
			inside = append(inside, l)
		}
	}
	require.NotEmpty(t, inside, "what the plugin starts in the sandbox loads the profile's LD_PRELOAD: %+v", loads)
	if fault {
		if mode == sandbox.Landlock && !sandboxtest.Dynamic(sandboxtest.Self(t)[0]) {
			t.Skip("positive control: this test binary, the launcher, is statically linked: LD_PRELOAD never reaches it")
		}
		require.NotEmpty(t, outside, "positive control: with the launcher-env fault a program outside the sandbox runs the tenant's code: %+v", loads)
		return
	}
	require.Empty(t, outside, "a program outside the sandbox ran the tenant's code: %+v", loads)
}

// newProbeHost is a manager of a plugin host for a profile holding
// envProbe, under agentd's default launcher in mode (pinned by the
// operator), its profile environment holding extra(home). tree is filled
// by the caller; Close must leave none of it.
func newProbeHost(t *testing.T, mode sandbox.Mode, fault bool, extra func(home string) []string) (*host.Manager, *[]int) {
	t.Helper()
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
	log := &syncio.Buffer{}
	m, err := host.New(host.Config{
		Profile: "alpha", Command: append(prefix, command...), Home: alpha.Home,
		Env:             append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + alpha.Home}, extra(alpha.Home)...),
		OwnPIDNamespace: mode == sandbox.Bwrap, EnvOutside: fault,
		PluginsDir: alpha.File("plugins"), Backend: refusingBackend{}, Log: log,
	})
	require.NoError(t, err)
	tree := new([]int)
	t.Cleanup(func() {
		require.NoError(t, m.Close())
		for _, pid := range *tree {
			// Close kills the tree; bwrap's namespace empties as the
			// kernel reaps it (as host's own tests wait for it).
			require.Eventually(t, func() bool { return !procgroup.Alive(pid) }, 10*time.Second, 10*time.Millisecond,
				"pid %d of the host's tree survived Close", pid)
		}
		if t.Failed() {
			t.Logf("plugin host log:\n%s", log.String())
		}
	})
	return m, tree
}
