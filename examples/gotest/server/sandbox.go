package server

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// A tool runs in a folder its profile may use, and sees nothing else.
//
// Its folder (terminal.cwd) must lie, symlinks resolved, inside <work
// root>/<profile> (TINYAGENT_WORK_ROOT, default <launch home>/work; the
// launch profile's is "default"), however it was set: config.set checks
// it, and so does every tool call, since a tenant can edit its own
// config.yaml. Not in a home: the launch profile's holds every other.
//
// The tool's shell runs under bubblewrap: the system's read-only folders,
// its own folder, a private /tmp and /proc, no network, and nothing of the
// server's (other homes, other workdirs, other tenants' processes).
// TINYAGENT_SANDBOX=none runs it bare, on a machine without bubblewrap.

// checkCwd resolves dir and says whether prof may run tools there.
func (p *pool) checkCwd(prof profile, dir string) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("cwd %q is not an absolute path", dir)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("cwd %q: %w", dir, err)
	}
	work := os.Getenv("TINYAGENT_WORK_ROOT")
	if work == "" {
		work = filepath.Join(p.launch, "work")
	}
	name := prof.name
	if name == "" {
		name = launchName
	}
	if root, err := filepath.EvalSymlinks(filepath.Join(work, name)); err == nil {
		if real == root || strings.HasPrefix(real, root+string(filepath.Separator)) {
			return real, nil
		}
	}
	return "", fmt.Errorf("cwd %q is outside the profile's work folder", dir)
}

// shell is the command that runs command in dir with env (NAME=VALUE) as
// its whole environment. Under bubblewrap the environment reaches only the
// sandboxed shell: bwrap itself runs outside the sandbox with the
// server's PATH alone, and gets the tenant's variables as --setenv pairs
// on a descriptor (--args 3), applied after --clearenv to what it runs. A
// tenant's LD_PRELOAD in its .env would otherwise run in bwrap, outside.
// The returned file is that descriptor's read end: close it once the
// command has started.
func shell(ctx context.Context, dir, command string, env []string) (*exec.Cmd, *os.File, error) {
	if os.Getenv("TINYAGENT_SANDBOX") == "none" {
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
		cmd.Dir = dir
		cmd.Env = env
		return cmd, nil, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: environment pipe: %w", err)
	}
	var feed strings.Builder
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		feed.WriteString("--setenv\x00" + k + "\x00" + v + "\x00")
	}
	// The pipe holds it all (a .env is small; far under the pipe's 64 KiB).
	_, err = w.WriteString(feed.String())
	w.Close()
	if err != nil {
		r.Close()
		return nil, nil, fmt.Errorf("sandbox: environment pipe: %w", err)
	}
	args := []string{"--clearenv", "--args", "3", "--die-with-parent", "--unshare-all", "--new-session",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"}
	for _, sys := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"} {
		args = append(args, "--ro-bind-try", sys, sys)
	}
	args = append(args, "--bind", dir, dir, "--chdir", dir, "--", "/bin/sh", "-c", command)
	cmd := exec.CommandContext(ctx, "bwrap", args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	cmd.ExtraFiles = []*os.File{r}
	return cmd, r, nil
}
