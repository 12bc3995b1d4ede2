package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/tenantcanary/tenantcanary/harness/remote"
)

// The server's host beyond its homes: its processes to kill, files to
// plant in the tenants' workdirs and links to them, its /proc to read.
// For a server the harness started, that is this machine; for a running
// server, its remote: block's exec (remote.exec), processes and
// workdirs.

// RemoteExecs reports whether the target is a running server on whose
// host the harness runs commands (remote.exec).
func (t *Target) RemoteExecs() bool { return t.URL != "" && t.Reach.Execs() }

// HostLacks says why the harness cannot reach into the server's host
// beyond its homes ("" when it can): a server it started is on this
// machine; a running server needs remote.exec, remote.processes and its
// files and workdirs (remote.home, pull, push, workdirs), each named
// when missing.
func (t *Target) HostLacks() string {
	if t.URL == "" {
		return ""
	}
	var miss []string
	if !t.Reach.Execs() {
		miss = append(miss, remote.FieldExec)
	}
	if !t.Reach.ListsProcesses() {
		miss = append(miss, remote.FieldProcesses)
	}
	if !t.Reach.OwnTenants() {
		miss = append(miss, remote.FieldFiles+" and remote.workdirs")
	}
	if len(miss) == 0 {
		return ""
	}
	return "give " + strings.Join(miss, ", ") + " in the target file's remote: block"
}

// hostShell runs command on a running server's host (remote.exec).
func (s *Sandbox) hostShell(ctx context.Context, what, command string, in io.Reader) (string, error) {
	if !s.Target.RemoteExecs() {
		return "", fmt.Errorf("%s on the server's host: %s", what, s.Target.RemoteLacks("exec"))
	}
	out, err := s.Target.Reach.Shell(ctx, command, in, nil)
	if err != nil {
		return out, fmt.Errorf("%s on the server's host: %w", what, err)
	}
	return out, nil
}

// KillOnHost sends sig to every pid on the server's host: this machine's
// processes for a server the harness started, kill through remote.exec
// for a running one. A pid that is gone already is no error.
func (s *Sandbox) KillOnHost(ctx context.Context, sig syscall.Signal, pids ...int) error {
	if len(pids) == 0 {
		return nil
	}
	if s.Target.URL == "" {
		var errs []error
		for _, p := range pids {
			if err := syscall.Kill(p, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("kill %d: %w", p, err))
			}
		}
		return errors.Join(errs...)
	}
	var ids []string
	for _, p := range pids {
		ids = append(ids, strconv.Itoa(p))
	}
	// A kill that fails for a pid still there was refused (another
	// user's process); one that is gone already is no error.
	cmd := "for p in " + remote.MustCommand(ids...) + `; do kill -s ` + remote.MustCommand(signalName(sig)) +
		` "$p" 2>/dev/null || { [ -d "/proc/$p" ] && echo "$p"; }; done; true`
	out, err := s.hostShell(ctx, "kill "+strings.Join(ids, " "), cmd, nil)
	if err != nil {
		return err
	}
	if left := strings.Fields(out); len(left) > 0 {
		return fmt.Errorf("kill %v on the server's host: refused (another user's process?)", left)
	}
	return nil
}

func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "KILL"
	case syscall.SIGTERM:
		return "TERM"
	case syscall.SIGSTOP:
		return "STOP"
	case syscall.SIGCONT:
		return "CONT"
	}
	return strconv.Itoa(int(sig))
}

// WriteOnHost writes data to the file path on the server's host, making
// its folder: this machine's file for a server the harness started, cat
// through remote.exec (data on its stdin) for a running one.
func (s *Sandbox) WriteOnHost(ctx context.Context, path string, data []byte, perm os.FileMode) error {
	if s.Target.URL == "" {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		return os.WriteFile(path, data, perm)
	}
	cmd := remote.MustCommand("mkdir", "-p", filepath.Dir(path)) + " && cat > " + remote.MustCommand(path) +
		" && " + remote.MustCommand("chmod", strconv.FormatUint(uint64(perm.Perm()), 8), path)
	_, err := s.hostShell(ctx, "write "+path, cmd, strings.NewReader(string(data)))
	return err
}

// LinkOnHost makes link a symbolic link to target on the server's host
// (its folder made; a link already at link is replaced).
func (s *Sandbox) LinkOnHost(ctx context.Context, target, link string) error {
	if s.Target.URL == "" {
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return err
		}
		_ = os.Remove(link)
		return os.Symlink(target, link)
	}
	cmd := remote.MustCommand("mkdir", "-p", filepath.Dir(link)) + " && " + remote.MustCommand("ln", "-sfn", target, link)
	_, err := s.hostShell(ctx, "link "+link, cmd, nil)
	return err
}

// RemoveOnHost removes path and what it holds on the server's host.
func (s *Sandbox) RemoveOnHost(ctx context.Context, path string) error {
	if s.Target.URL == "" {
		return os.RemoveAll(path)
	}
	_, err := s.hostShell(ctx, "remove "+path, remote.MustCommand("rm", "-rf", "--", path), nil)
	return err
}

// ReadOnHost reads up to limit bytes of the file path on the server's
// host (/proc/PID/limits, a file planted in a workdir).
func (s *Sandbox) ReadOnHost(ctx context.Context, path string, limit int64) ([]byte, error) {
	if s.Target.URL == "" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return io.ReadAll(io.LimitReader(f, limit))
	}
	out, err := s.hostShell(ctx, "read "+path, remote.MustCommand("head", "-c", strconv.FormatInt(limit, 10), "--", path), nil)
	return []byte(out), err
}

// socketOfPid is a line find prints for a process's socket: /proc/PID/fd/N.
var socketOfPid = regexp.MustCompile(`^/proc/(\d+)/fd/\d+$`)

// ServerPids lists the processes on a running server's host that listen
// on its url's port (read from the host's /proc/net/tcp and tcp6 and its
// processes' fds through remote.exec): the server, to crash it. A port
// forwarded to another (a kubectl port-forward) is found only when the
// numbers are the same.
func (s *Sandbox) ServerPids(ctx context.Context) ([]int, error) {
	u, err := url.Parse(s.Target.URL)
	if err != nil || u.Port() == "" {
		return nil, fmt.Errorf("the server's url %q names no port", s.Target.URL)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return nil, fmt.Errorf("the server's url %q: port: %w", s.Target.URL, err)
	}
	hex := fmt.Sprintf(":%04X", port)
	// The listening sockets' inodes (state 0A), then the fds pointing at them.
	cmd := `for i in $(awk -v p=` + remote.MustCommand(hex) + ` '$4 == "0A" && substr($2, length($2) - 4) == p { print $10 }' /proc/net/tcp /proc/net/tcp6 2>/dev/null); do ` +
		`find /proc/[0-9]*/fd -lname "socket:\[$i\]" 2>/dev/null; done; true`
	out, err := s.hostShell(ctx, "find the server's pid", cmd, nil)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, line := range strings.Fields(out) {
		if m := socketOfPid.FindStringSubmatch(line); m != nil {
			p, _ := strconv.Atoi(m[1])
			if !slices.Contains(pids, p) {
				pids = append(pids, p)
			}
		}
	}
	if len(pids) == 0 {
		return nil, fmt.Errorf("no process on the server's host listens on port %d (its url's)", port)
	}
	return pids, nil
}

// WaitRemoteDown waits, within ctx, until a running server's health URL
// no longer answers (after a crash the harness caused).
func (s *Sandbox) WaitRemoteDown(ctx context.Context) error {
	return remote.WaitHealth(ctx, s.Target.Reach.HealthURL(s.Target.URL), false)
}
