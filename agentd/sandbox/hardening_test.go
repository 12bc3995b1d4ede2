package sandbox_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
	"github.com/tenantcanary/tenantcanary/agentd/sandbox/sandboxtest"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

var confining = []sandbox.Mode{sandbox.Bwrap, sandbox.Landlock}

// TestBwrapArgvDropsCapsAndMountsAFreshProc: bwrap always drops every
// capability and mounts a /proc of its own PID namespace; only the
// host-shared-pidns fault shows the host's; terminal.network none adds a
// network namespace.
func TestBwrapArgvDropsCapsAndMountsAFreshProc(t *testing.T) {
	t.Parallel()
	need(t, sandbox.Bwrap)
	home := t.TempDir()
	argv, err := sandbox.Policy{Mode: sandbox.Bwrap, Home: home, Dir: home}.Wrap([]string{"true"})
	require.NoError(t, err)
	a := " " + strings.Join(argv, " ") + " "
	require.Contains(t, a, " --cap-drop ALL ")
	require.Contains(t, a, " --unshare-pid ")
	require.Contains(t, a, " --proc /proc ")
	require.NotContains(t, a, " --ro-bind /proc ")
	require.NotContains(t, a, " --unshare-net ", "network host: the host's")

	argv, err = sandbox.Policy{Mode: sandbox.Bwrap, Home: home, Dir: home, Network: sandbox.NetNone}.Wrap([]string{"true"})
	require.NoError(t, err)
	require.Contains(t, strings.Join(argv, " "), " --unshare-net ")

	argv, err = sandbox.Policy{Mode: sandbox.Bwrap, Home: home, Dir: home, SharedPID: true}.Wrap([]string{"true"})
	require.NoError(t, err)
	a = " " + strings.Join(argv, " ") + " "
	require.Contains(t, a, " --ro-bind /proc /proc ", "positive control: the fault shows the host's /proc")
	require.Contains(t, a, " --cap-drop ALL ", "still no capabilities")
}

// TestNoCapabilitiesInside: as root, a sandboxed command holds no
// capability: none effective, none in the bounding set (bwrap: read from
// its own /proc), and it cannot chown a file to another user (both modes).
func TestNoCapabilitiesInside(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("capabilities are dropped only when agentd runs as root: a non-root sandbox holds none to begin with")
	}
	forEachMode(t, confining, func(t *testing.T, mode sandbox.Mode) {
		home := t.TempDir()
		script := "echo x > f; chown 65534 f 2>&1 && echo CHOWNED; stat -c owner=%u f; " +
			"grep -E '^Cap(Eff|Bnd|Prm|Amb)' /proc/self/status 2>&1; true"
		out := run(t, sandbox.Policy{Mode: mode, Home: home, Dir: home, Self: sandboxtest.Self(t)}, baseEnv(home), script)
		require.NotContains(t, out, "CHOWNED", "a chown needing CAP_CHOWN succeeded:\n%s", out)
		require.Contains(t, out, "owner=0")
		if mode == sandbox.Bwrap {
			for _, set := range []string{"CapEff", "CapBnd", "CapPrm", "CapAmb"} {
				require.Contains(t, out, set+":\t0000000000000000", "%s inside bwrap:\n%s", set, out)
			}
		}
	})
	// Positive control: unconfined, root chowns.
	home := t.TempDir()
	out := run(t, sandbox.Policy{Mode: sandbox.None, Home: home, Dir: home}, baseEnv(home), "echo x > f; chown 65534 f && echo CHOWNED")
	require.Contains(t, out, "CHOWNED")
}

// TestNetworkNoneCannotReachTheHost: with terminal.network none a
// sandboxed shell cannot connect to a loopback listener of the host; with
// host it can (the positive control).
func TestNetworkNoneCannotReachTheHost(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("HELLO-FROM-HOST\n"))
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	script := fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && head -n1 <&3; echo status=$?", port)
	forEachMode(t, confining, func(t *testing.T, mode sandbox.Mode) {
		home := t.TempDir()
		pol := sandbox.Policy{Mode: mode, Home: home, Dir: home, Self: sandboxtest.Self(t), Network: sandbox.NetNone}
		if _, err := pol.Command([]string{"true"}, nil); err != nil {
			require.ErrorIs(t, err, sandbox.ErrUnavailable)
			t.Skipf("network none cannot be enforced by %s here: %v", mode, err)
		}
		out := run(t, pol, baseEnv(home), script)
		require.NotContains(t, out, "HELLO-FROM-HOST", "the shell reached the host's listener:\n%s", out)

		pol.Network = sandbox.NetHost
		out = run(t, pol, baseEnv(home), script)
		require.Contains(t, out, "HELLO-FROM-HOST", "positive control: with network host it does")
	})
}

// TestWorkdirIsBoundByDescriptor: a workdir outside the home is bound
// through the descriptor opened when the command was made: a symlink
// swapped in after that (the workdir renamed away, a link to another
// tenant's folder put in its place) reaches nothing of that folder.
func TestWorkdirIsBoundByDescriptor(t *testing.T) {
	t.Parallel()
	forEachMode(t, confining, func(t *testing.T, mode sandbox.Mode) {
		root := t.TempDir()
		home, work, victim, moved := filepath.Join(root, "home"), filepath.Join(root, "work"), filepath.Join(root, "victim"), filepath.Join(root, "moved")
		for _, d := range []string{home, work, victim} {
			require.NoError(t, os.Mkdir(d, 0o700))
		}
		secret := "victim-secret-" + token(t)
		require.NoError(t, os.WriteFile(filepath.Join(victim, "secret"), []byte(secret), 0o600))
		pol := sandbox.Policy{Mode: mode, Home: home, Dir: home, Work: []string{work}, Allow: []string{home, work}, Self: sandboxtest.Self(t)}
		c, err := pol.Command([]string{"bash", "-c", "cat " + work + "/secret; echo planted > " + work + "/planted; true"}, baseEnv(home))
		require.NoError(t, err)
		require.NoError(t, os.Rename(work, moved))
		require.NoError(t, os.Symlink(victim, work))
		out := startAndWait(t, c)
		require.NotContains(t, out, secret, "the swapped link was followed")
		_, err = os.Stat(filepath.Join(victim, "planted"))
		require.ErrorIs(t, err, os.ErrNotExist, "a write landed in the victim's folder")
		if mode == sandbox.Bwrap {
			b, err := os.ReadFile(filepath.Join(moved, "planted"))
			require.NoError(t, err, "bwrap bound the folder it opened:\n%s", out)
			require.Equal(t, "planted\n", string(b))
		}
	})
}

// TestWorkdirRefusedAtBindTime: a workdir through a symlink, in a system
// folder, or outside Allow is refused when the command is made.
func TestWorkdirRefusedAtBindTime(t *testing.T) {
	t.Parallel()
	forEachMode(t, confining, func(t *testing.T, mode sandbox.Mode) {
		root := t.TempDir()
		home, work, other := filepath.Join(root, "home"), filepath.Join(root, "work"), filepath.Join(root, "other")
		for _, d := range []string{home, work, other} {
			require.NoError(t, os.Mkdir(d, 0o700))
		}
		link := filepath.Join(work, "link")
		require.NoError(t, os.Symlink(other, link))
		for _, c := range []struct {
			work, rule string
			allow      []string
		}{
			{link, "symlink", []string{home, work}},
			{other, "not in the profile's home or workdir roots", []string{home, work}},
			{"/proc", "system folder /proc", nil},
			{"/dev/shm", "system folder /dev", nil},
			{"/usr/local/bin", "system folder /usr", nil},
			{"/var/tmp", "shared system folder /var/tmp", nil},
			{"/", "holds the system folder", nil},
		} {
			pol := sandbox.Policy{Mode: mode, Home: home, Dir: c.work, Work: []string{c.work}, Allow: c.allow, Self: sandboxtest.Self(t)}
			_, err := pol.Command([]string{"true"}, nil)
			require.ErrorIs(t, err, sandbox.ErrWorkdirRefused, "workdir %s", c.work)
			require.ErrorContains(t, err, c.rule, "workdir %s", c.work)
			_, err = pol.Wrap([]string{"true"})
			require.ErrorIs(t, err, sandbox.ErrWorkdirRefused, "workdir %s (wrap)", c.work)
		}
		// The workdir-anywhere fault binds by path, unjudged.
		pol := sandbox.Policy{Mode: mode, Home: home, Dir: link, Work: []string{link}, Allow: []string{home, work}, Self: sandboxtest.Self(t), BindByPath: true}
		_, err := pol.Command([]string{"true"}, nil)
		require.NoError(t, err, "positive control: the fault binds the link")
	})
}

// startAndWait starts a made command and returns its output once it and
// its tree ended.
func startAndWait(t *testing.T, c *sandbox.Cmd) string {
	t.Helper()
	var out strings.Builder
	c.Stdout, c.Stderr = &out, &out
	procgroup.Prepare(c.Cmd)
	c.SysProcAttr.Setpgid, c.SysProcAttr.Setsid = false, true
	require.NoError(t, c.Start())
	c.Started()
	waited := make(chan struct{})
	go func() { _ = c.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(60 * time.Second):
		t.Errorf("command did not end within 60s")
	}
	c.Stop(waited)
	return out.String()
}

// TestCheckReportsTheNetwork: `agentd sandbox check` says how
// terminal.network is enforced in the mode the profile runs as.
func TestCheckReportsTheNetwork(t *testing.T) {
	t.Parallel()
	need(t, sandbox.Bwrap)
	var b strings.Builder
	code := sandbox.Check(&b, sandbox.Configured{Mode: sandbox.Bwrap, Network: sandbox.NetNone})
	require.Equal(t, 0, code, b.String())
	require.Contains(t, b.String(), "terminal.network is none (the default): a network namespace of its own")
	b.Reset()
	code = sandbox.Check(&b, sandbox.Configured{Mode: sandbox.Bwrap, Network: sandbox.NetHost, NetworkFrom: "/m/config.yaml"})
	require.Equal(t, 0, code, b.String())
	require.Contains(t, b.String(), "terminal.network is host (pinned by the operator in /m/config.yaml)")
}
