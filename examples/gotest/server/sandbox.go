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

// shell is the command that runs command in dir.
func shell(ctx context.Context, dir, command string) *exec.Cmd {
	if os.Getenv("TINYAGENT_SANDBOX") == "none" {
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
		cmd.Dir = dir
		return cmd
	}
	args := []string{"--die-with-parent", "--unshare-all", "--new-session",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"}
	for _, sys := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"} {
		args = append(args, "--ro-bind-try", sys, sys)
	}
	args = append(args, "--bind", dir, dir, "--chdir", dir, "--", "/bin/sh", "-c", command)
	return exec.CommandContext(ctx, "bwrap", args...)
}
