package scenarios

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/remote"
)

// sshStage is a staging host on this machine that the harness reaches
// only through agentd's port and a real SSH server: sshd and agentd run
// in a bubblewrap namespace of their own (PID and IPC namespaces; the
// server's folder a tmpfs there, empty from outside), and the target
// file is examples/targets/staging-ssh's, filled in.
type sshStage struct {
	dir       string // the stage: ssh keys, the control script, the roster
	server    string // dir/server: the namespace's tmpfs (the server's home is server/home)
	sshPort   string
	servePort string
	user      string
	ns        *harness.Proc // bwrap, running sshd
	nsID      string        // the namespace's PID namespace (readlink /proc/PID/ns/pid)
	target    string        // the filled-in target file
}

// sshStageNeeds says what this machine lacks for an sshStage ("" when
// nothing): sshd, ssh, ssh-keygen, bwrap and namespaces bwrap can make.
func sshStageNeeds(ctx context.Context) string {
	for _, p := range []string{sshdPath, "ssh", "ssh-keygen", "bwrap", "base64", "setsid"} {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Sprintf("%s is not installed (Debian: openssh-server, openssh-client, bubblewrap, coreutils, util-linux)", p)
		}
	}
	dir, err := os.MkdirTemp("", "tcanary-bwrap-probe-")
	if err != nil {
		return err.Error()
	}
	defer os.RemoveAll(dir)
	out, err := exec.CommandContext(ctx, "bwrap", "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--bind", "/", "/",
		"--dev", "/dev", "--proc", "/proc", "--tmpfs", dir, "true").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("bwrap cannot make a PID namespace with a tmpfs here: %v: %s", err, out)
	}
	return ""
}

// sshdPath is Debian's sshd: it must be run by its absolute path (it
// re-executes itself).
const sshdPath = "/usr/sbin/sshd"

// startSSHStage starts the namespace with sshd in it, and agentd there
// over ssh; everything is stopped, and proved gone, in t's cleanups.
func startSSHStage(t *testing.T) *sshStage {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: a staging host over ssh runs scenarios for minutes")
	}
	if why := sshStageNeeds(t.Context()); why != "" {
		t.Skip(why)
	}
	u, err := user.Current()
	require.NoError(t, err)
	st := &sshStage{dir: t.TempDir(), user: u.Username}
	st.server = filepath.Join(st.dir, "server")
	sshDir := filepath.Join(st.dir, "ssh")
	require.NoError(t, os.MkdirAll(st.server, 0o700))
	require.NoError(t, os.MkdirAll(sshDir, 0o700))
	for _, k := range []string{"host_key", "client_key"} {
		out, err := exec.CommandContext(t.Context(), "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "tcanary-"+k, "-f", filepath.Join(sshDir, k)).CombinedOutput()
		require.NoError(t, err, "ssh-keygen: %s", out)
	}
	pub, err := os.ReadFile(filepath.Join(sshDir, "client_key.pub"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(sshDir, "authorized_keys"), pub, 0o600))
	st.sshPort, err = harness.FreePort()
	require.NoError(t, err)
	st.servePort, err = harness.FreePort()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(sshDir, "sshd_config"), []byte(strings.Join([]string{
		"ListenAddress 127.0.0.1", "Port " + st.sshPort,
		"HostKey " + filepath.Join(sshDir, "host_key"),
		"PidFile " + filepath.Join(sshDir, "sshd.pid"),
		"AuthorizedKeysFile " + filepath.Join(sshDir, "authorized_keys"),
		"UsePAM no", "StrictModes no", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
		"PubkeyAuthentication yes", "PermitRootLogin prohibit-password", "AllowTcpForwarding no", "X11Forwarding no",
		"PrintMotd no", "LogLevel ERROR", "",
	}, "\n")), 0o600))

	// The control script and the target file, filled in.
	fill := strings.NewReplacer("STAGE", st.dir, "SSH_PORT", st.sshPort, "SERVE_PORT", st.servePort, "SSH_USER", st.user, "SERVER_BIN", agentdBin)
	for _, f := range []string{"agentd-ctl", "staging.yaml", "cluster.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "examples", "targets", "staging-ssh", f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(st.dir, f), []byte(fill.Replace(string(data))), 0o644))
	}
	st.target = filepath.Join(st.dir, "staging.yaml")

	// The namespace: sshd, and the operator's scope on the tmpfs (the
	// tenants' workdirs are there too).
	managed := "terminal:\n  workdir_roots: [\"" + filepath.Join(st.server, "work") + "/{profile}\"]\n"
	argv := []string{"bwrap", "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
		"--tmpfs", st.server}
	if os.Geteuid() == 0 {
		// sshd as root wants its privilege-separation folder.
		argv = append(argv, "--tmpfs", "/run", "--dir", "/run/sshd", "--chmod", "0755", "/run/sshd")
	}
	argv = append(argv, "sh", "-c", `mkdir -p "$1/managed" && printf '%s' "$2" > "$1/managed/config.yaml" && exec `+sshdPath+` -D -e -f "$3"`,
		"ns-init", st.server, managed, filepath.Join(sshDir, "sshd_config"))
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	st.ns, err = harness.StartProc(ctx, harness.ProcSpec{Name: "staging namespace", Argv: argv, Dir: st.dir, Env: os.Environ(),
		LogPath: filepath.Join(st.dir, "namespace.log")})
	require.NoError(t, err)
	t.Cleanup(func() {
		st.ns.Kill()
		cancel()
		require.Eventually(t, func() bool { return len(pidsInNamespace(st.nsID)) == 0 }, 30*time.Second, 20*time.Millisecond,
			"processes of the staging namespace outlived it: %v", pidsInNamespace(st.nsID))
	})
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(st.dir, "namespace.log"))
			t.Logf("staging namespace log:\n%s", log)
		}
	})
	st.awaitSSH(t)

	// The server, started through the target file's command; every
	// scenario plants its own tenants' homes.
	tg, err := harness.LoadTarget(st.target)
	require.NoError(t, err)
	st.restart(t, tg)
	return st
}

// awaitSSH waits until sshd answers a command, and notes the namespace's
// PID namespace from inside it.
func (st *sshStage) awaitSSH(t *testing.T) {
	t.Helper()
	tg, err := harness.LoadTarget(st.target)
	require.NoError(t, err)
	var last error
	require.Eventually(t, func() bool {
		if st.ns.ExitErr() != nil {
			return true
		}
		var out string
		out, last = st.ssh(t, tg, "readlink /proc/self/ns/pid")
		st.nsID = strings.TrimSpace(out)
		return last == nil
	}, time.Minute, 100*time.Millisecond, "sshd did not answer: %v", last)
	select {
	case <-st.ns.Done():
		t.Fatalf("the staging namespace ended: %v\n%s", st.ns.ExitErr(), st.ns.Tail())
	default:
	}
	self, err := os.Readlink("/proc/self/ns/pid")
	require.NoError(t, err)
	require.NotEqual(t, self, st.nsID, "sshd runs in a PID namespace of its own")
	require.NotEmpty(t, pidsInNamespace(st.nsID), "positive control: the namespace's processes are seen from here")
}

// restart stops and starts agentd through the target file's commands and
// waits for its health.
func (st *sshStage) restart(t *testing.T, tg harness.Target) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	_, err := remote.Run(ctx, "remote.stop", tg.Reach.Stop, tg.Reach.Home, nil, nil)
	require.NoError(t, err)
	_, err = remote.Run(ctx, "remote.start", tg.Reach.Start, tg.Reach.Home, nil, nil)
	require.NoError(t, err)
	if err := remote.WaitHealth(ctx, tg.Reach.HealthURL(tg.URL), true); err != nil {
		log, lerr := st.ssh(t, tg, "cat "+filepath.Join(st.server, "serve-*.log"))
		t.Fatalf("%v\nthe server's log (%v):\n%s", err, lerr, log)
	}
}

// ssh runs a shell command on the staging host with the target file's
// ssh command line.
func (st *sshStage) ssh(t *testing.T, tg harness.Target, command string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	argv := append(append([]string(nil), tg.Reach.Stop[:len(tg.Reach.Stop)-1]...), command)
	return remote.Run(ctx, "ssh", argv, "", nil, nil)
}

// seedFault restarts agentd with fault seeded ("" for none).
func (st *sshStage) seedFault(t *testing.T, fault string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(st.dir, "agentd-faults"), []byte(fault), 0o644))
	tg, err := harness.LoadTarget(st.target)
	require.NoError(t, err)
	st.restart(t, tg)
}

// pidsInNamespace lists the live processes of the PID namespace ns
// (readlink /proc/PID/ns/pid), as this machine's /proc shows them.
func pidsInNamespace(ns string) []int {
	if ns == "" {
		return nil
	}
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && l == ns {
			out = append(out, pid)
		}
	}
	return out
}
