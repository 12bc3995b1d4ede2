package surface

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// Form is one hostile thing a tenant can leave where the server expects
// one of its own files: what its own sandboxed shell can make in its home.
type Form string

// The hostile forms every file the server reads is given.
const (
	FIFO       Form = "fifo"        // an open for reading blocks for ever with no writer
	DeviceLink Form = "device-link" // a link to /dev/zero: a read never ends
	Sparse     Form = "sparse"      // a huge sparse file (HugeSize), no disk spent
	Directory  Form = "directory"   // a folder where a file was
	Socket     Form = "socket"      // a unix socket: an open fails, a connect may hang
	LinkOut    Form = "link-out"    // a link to the victim's file of the same path
	MiddleLink Form = "middle-link" // the path's first folder linked to the victim's
)

// Forms lists every form, in the order they are tried.
func Forms() []Form {
	return []Form{FIFO, DeviceLink, Sparse, Directory, Socket, LinkOut, MiddleLink}
}

// HugeSize is a sparse file's size: far past any sane limit, and costing
// no disk.
const HugeSize = 16 << 30

// ErrNotApplicable: the form makes no sense for this path (a middle link
// for a file at the home's top level, say).
var ErrNotApplicable = errors.New("form not applicable")

// Plant puts form in place of rel (a slash path) under home, moving what
// was there into aside (a folder outside every home), and returns the
// function that puts it back. victimHome is another tenant's home, for
// the link forms.
func Plant(home, rel string, form Form, victimHome, aside string) (restore func() error, err error) {
	rel = path.Clean(rel)
	if rel == "." || strings.HasPrefix(rel, "../") || path.IsAbs(rel) {
		return nil, fmt.Errorf("surface: plant %s at %q: not a path in the home", form, rel)
	}
	at := rel
	if form == MiddleLink {
		first, _, ok := strings.Cut(rel, "/")
		if !ok {
			return nil, fmt.Errorf("surface: %s at %s: %w (no folder in the path)", form, rel, ErrNotApplicable)
		}
		at = first
	}
	target := filepath.Join(home, filepath.FromSlash(at))
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return nil, fmt.Errorf("surface: plant %s at %s: %w", form, at, err)
	}
	put, err := setAside(target, aside)
	if err != nil {
		return nil, fmt.Errorf("surface: plant %s at %s: %w", form, at, err)
	}
	var made error
	switch form {
	case FIFO:
		made = syscall.Mkfifo(target, 0o644)
	case DeviceLink:
		made = os.Symlink("/dev/zero", target)
	case Sparse:
		made = sparse(target)
	case Directory:
		made = os.Mkdir(target, 0o755)
	case Socket:
		made = socketFile(target)
	case LinkOut, MiddleLink:
		made = os.Symlink(filepath.Join(victimHome, filepath.FromSlash(at)), target)
	default:
		made = fmt.Errorf("unknown form %q", form)
	}
	if made != nil {
		_ = put()
		return nil, fmt.Errorf("surface: plant %s at %s: %w", form, at, made)
	}
	return put, nil
}

func sparse(p string) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if err := f.Truncate(HugeSize); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// socketFile leaves a bound unix socket's file at p (nobody listens).
func socketFile(p string) error {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
	if err != nil {
		return err
	}
	l.SetUnlinkOnClose(false)
	return l.Close()
}

// setAside moves what is at p (if anything) into a fresh folder under
// aside and returns the function that removes whatever is at p then and
// moves it back.
func setAside(p, aside string) (func() error, error) {
	if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
		return func() error { return removeAny(p) }, nil
	} else if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(aside, "aside-")
	if err != nil {
		return nil, err
	}
	kept := filepath.Join(dir, filepath.Base(p))
	if err := move(p, kept); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return func() error {
		if err := removeAny(p); err != nil {
			return err
		}
		if err := move(kept, p); err != nil {
			return fmt.Errorf("put %s back: %w", p, err)
		}
		return os.RemoveAll(dir)
	}, nil
}

// removeAny removes what is at p, a folder with what the server may have
// put in it included; nothing there is fine.
func removeAny(p string) error {
	if err := os.RemoveAll(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// move renames, or copies a regular file across file systems.
func move(from, to string) error {
	err := os.Rename(from, to)
	if err == nil || !errors.Is(err, syscall.EXDEV) {
		return err
	}
	fi, err := os.Lstat(from)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("move %s across file systems: not a regular file", from)
	}
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Remove(from)
}
