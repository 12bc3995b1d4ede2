package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrWorkdirRefused is a working directory a sandbox will not bind: a
// system folder, a path through a symlink, or a folder outside the places
// its profile may work in. The message names the rule that refused it.
var ErrWorkdirRefused = errors.New("workdir refused")

// systemTrees are the host's folders a workdir may never be in or above:
// the kernel's views (a bind of /proc over the sandbox's own shows every
// process's environment), the devices, the runtime state and the system
// programs (a writable /usr/local/bin runs in every other shell).
var systemTrees = []string{"/proc", "/sys", "/dev", "/run", "/boot", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}

// sharedDirs are folders every user or service shares: refused themselves
// (a bind shows, and lets the tenant plant links into, everyone's files),
// though a folder beneath one may be a profile's own place.
var sharedDirs = []string{"/", "/tmp", "/var/tmp", "/var", "/opt", "/srv", "/root", "/home", "/mnt", "/media"}

// SystemRule names the rule that keeps a workdir out of path (a real path:
// symlinks resolved), or "" when none does: path is in or above a system
// tree (/proc, /sys, /dev, /run, /usr, /etc, ...), or is a shared folder
// itself (/, /tmp, /var/tmp, /var, /home, ...).
func SystemRule(path string) string {
	path = filepath.Clean(path)
	for _, d := range systemTrees {
		if within(path, d) {
			return "it is in the system folder " + d
		}
		if within(d, path) {
			return "it holds the system folder " + d
		}
	}
	for _, d := range sharedDirs {
		if path == d {
			return "it is the shared system folder " + d
		}
	}
	return ""
}

// OpenDir opens the directory at path (absolute) as an O_PATH descriptor
// without following any symlink on the way, and returns it with its real
// path as the kernel reports it. A symlink anywhere in path is an error
// wrapping ErrWorkdirRefused: a path checked earlier cannot have been
// swapped for a link since.
func OpenDir(path string) (*os.File, string, error) {
	if !filepath.IsAbs(path) {
		return nil, "", fmt.Errorf("%w: %s is not an absolute path", ErrWorkdirRefused, path)
	}
	path = filepath.Clean(path)
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		fd, err = walkNoFollow(path) // a kernel before 5.6, or a seccomp filter refusing openat2
	}
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		return nil, "", fmt.Errorf("%w: %s: a symlink or a file is on the way (%v), and a workdir is bound only through real folders", ErrWorkdirRefused, path, err)
	case err != nil:
		return nil, "", fmt.Errorf("open workdir %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		f.Close()
		return nil, "", fmt.Errorf("open workdir %s: read its real path: %w", path, err)
	}
	if real != path {
		f.Close()
		return nil, "", fmt.Errorf("%w: %s opened as %s (moved or linked while it was opened)", ErrWorkdirRefused, path, real)
	}
	return f, real, nil
}

// walkNoFollow opens path component by component with O_NOFOLLOW, so no
// symlink on the way is followed.
func walkNoFollow(path string) (int, error) {
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, name := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
		if name == "" {
			continue
		}
		next, err := unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// workRule is the bind-time judgement of a workdir's real path: not a
// system place, not a hidden folder, and beneath one of Allow when the
// policy names its places.
func (p Policy) workRule(real string) error {
	if why := SystemRule(real); why != "" {
		return fmt.Errorf("%w: %s: %s", ErrWorkdirRefused, real, why)
	}
	for _, h := range p.Hide {
		if within(real, h) || within(h, real) {
			return fmt.Errorf("%w: %s: it shows %s, which the sandbox hides", ErrWorkdirRefused, real, h)
		}
	}
	if p.Allow == nil {
		return nil
	}
	for _, a := range p.Allow {
		if within(real, a) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s: it is not in the profile's home or workdir roots (%s)", ErrWorkdirRefused, real, strings.Join(p.Allow, ", "))
}

// openWork opens and judges each extra workdir (those outside the home):
// the descriptors a sandbox binds instead of the paths. On error every
// descriptor is closed.
func (p Policy) openWork() ([]*os.File, error) {
	var out []*os.File
	for _, w := range p.extraWork() {
		f, real, err := OpenDir(w)
		if err == nil {
			err = p.workRule(real)
			if err != nil {
				f.Close()
			}
		}
		if err != nil {
			closeAll(out)
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// extraWork is Work without the folders inside Home (bound with it).
func (p Policy) extraWork() []string {
	var out []string
	for _, w := range p.Work {
		if !within(w, p.Home) {
			out = append(out, filepath.Clean(w))
		}
	}
	return out
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}
