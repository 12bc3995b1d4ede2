package host_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/host"
)

const tenantPlugin = `package tenantprobe

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/tenantcanary/tenantcanary/plugin"
)

func Register(ctx plugin.Context) error {
	if err := ctx.RegisterTool(plugin.Tool{Name: "tenant_dump", Handler: func(args map[string]any) (string, error) {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		b, err := json.Marshal(map[string]any{"pid": os.Getpid(), "cwd": wd, "env": os.Environ()})
		return string(b), err
	}}); err != nil {
		return err
	}
	return ctx.RegisterTool(plugin.Tool{Name: "tenant_read", Handler: func(args map[string]any) (string, error) {
		b, err := os.ReadFile(fmt.Sprint(args["path"]))
		return string(b), err
	}})
}
`

// twoTenants gives two profiles, a and b, each with its own plugin host;
// launcher, if set, wraps each host's argv given its home.
func twoTenants(t *testing.T, launcher func(root, home string) []string) (root string, a, b *env) {
	root = newHome(t)
	mk := func(name string) *env {
		home := filepath.Join(root, name)
		writePlugin(t, home, "tenantprobe", "name: tenantprobe\n", tenantPlugin)
		require.NoError(t, os.WriteFile(filepath.Join(home, "secret.txt"), []byte("canary-file-"+name), 0o600))
		return newEnv(t, home, func(c *host.Config) {
			if launcher != nil {
				c.Command = append(launcher(root, home), c.Command...)
			}
		})
	}
	return root, mk("a"), mk("b")
}

func TestEachTenantsHostHoldsOnlyItsOwnEnvironmentAndHome(t *testing.T) {
	t.Parallel()
	_, a, b := twoTenants(t, nil)
	for _, tc := range []struct {
		e          *env
		own, other string
	}{{a, "a", "b"}, {b, "b", "a"}} {
		v := tc.e.call("s-"+tc.own, "tenant_dump", nil)
		require.Equal(t, tc.e.home, v["cwd"])
		dump := strings.Join(func() (out []string) {
			for _, x := range v["env"].([]any) {
				out = append(out, x.(string))
			}
			return
		}(), "\n")
		require.Contains(t, dump, "PROFILE_CANARY=canary-"+tc.own, "positive control: the tenant's own canary")
		require.NotContains(t, dump, "canary-"+tc.other, "tenant %s's host holds tenant %s's canary", tc.own, tc.other)
	}

	// Killing one tenant's host disturbs no other tenant.
	bPID := pidOf(b.call("s-b", "tenant_dump", nil))
	aPID := pidOf(a.call("s-a", "tenant_dump", nil))
	require.NoError(t, syscall.Kill(aPID, syscall.SIGKILL))
	require.Eventually(t, func() bool { return a.m.PID() != aPID }, eventually, tick)
	require.Equal(t, bPID, pidOf(b.call("s-b", "tenant_dump", nil)))
	require.Equal(t, uint64(1), b.m.Generation())
	require.NotEqual(t, aPID, pidOf(a.call("s-a", "tenant_dump", nil)), "tenant a's host came back")
}

// With plugins.host.launcher set to bubblewrap, a tenant's plugin cannot
// read another tenant's home; without it (the positive control) it can.
func TestBubblewrapLauncherHidesOtherTenantsHomes(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap is not installed (.ci/run installs bubblewrap)")
	}
	if out, err := exec.Command("bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true").CombinedOutput(); err != nil {
		t.Skipf("bwrap cannot run here (user namespaces refused?): %v: %s", err, out)
	}
	read := func(e *env, path string) (string, error) {
		out, err := e.m.Call(context.Background(), "s", "tenant_read", map[string]any{"path": path})
		e.seePID()
		return out, err
	}
	root, a, b := twoTenants(t, nil)
	out, err := read(a, filepath.Join(b.home, "secret.txt"))
	require.NoError(t, err, "positive control: unsandboxed, the read works")
	require.Equal(t, "canary-file-b", out)
	_ = root

	_, a, b = twoTenants(t, func(root, home string) []string {
		return []string{"bwrap", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
			"--tmpfs", root, "--bind", home, home, "--chdir", home}
	})
	out, err = read(a, filepath.Join(a.home, "secret.txt"))
	require.NoError(t, err)
	require.Equal(t, "canary-file-a", out, "a tenant still reads its own home")
	_, err = read(a, filepath.Join(b.home, "secret.txt"))
	require.ErrorIs(t, err, host.ErrPlugin)
	require.Contains(t, err.Error(), "no such file or directory")
	out, err = read(b, filepath.Join(b.home, "secret.txt"))
	require.NoError(t, err)
	require.Equal(t, "canary-file-b", out)
}
