// Package hostilefile makes what a hostile tenant leaves where a server
// expects one of its home's files: a FIFO (an open for reading blocks with
// no writer), a link to a device that never ends, a huge sparse file, a
// folder, a socket. agentd's tests and the harness's generated attacks
// (harness/surface) plant them alike.
//
//	if err := hostilefile.Make(filepath.Join(home, ".env"), hostilefile.FIFO); err != nil { ... }
//	defer hostilefile.Release(filepath.Join(home, ".env")) // frees a reader blocked opening it
package hostilefile

import (
	"fmt"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Form is one hostile thing in place of a file.
type Form string

// The forms Make knows.
const (
	FIFO       Form = "fifo"        // a named pipe: an open for reading with no writer blocks
	DeviceLink Form = "device-link" // a symlink to /dev/zero: a read never ends
	Sparse     Form = "sparse"      // a sparse file of HugeSize bytes (no disk spent)
	Directory  Form = "directory"   // a folder where a file belongs
	Socket     Form = "socket"      // a unix socket nobody listens on (an open fails with ENXIO)
)

// HugeSize is a Sparse file's apparent size: far past any sane limit.
const HugeSize = 16 << 30

// Make puts form at path, where nothing is: its folder must exist.
func Make(path string, form Form) error {
	var err error
	switch form {
	case FIFO:
		err = unix.Mkfifo(path, 0o600)
	case DeviceLink:
		err = os.Symlink("/dev/zero", path)
	case Sparse:
		err = MakeSparse(path, HugeSize)
	case Directory:
		err = os.Mkdir(path, 0o700)
	case Socket:
		err = socketFile(path)
	default:
		err = fmt.Errorf("unknown form %q", form)
	}
	if err != nil {
		return fmt.Errorf("make a %s at %s: %w", form, path, err)
	}
	return nil
}

// MakeSparse makes a sparse file of size bytes at path (replacing a
// regular file there).
func MakeSparse(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// socketFile leaves a bound unix socket's file at p (nobody listens). A
// path longer than a socket address holds is bound through its folder's
// descriptor (/proc/self/fd/N/name).
func socketFile(p string) error {
	name := p
	if len(p) > 100 {
		dir, err := os.Open(filepath.Dir(p))
		if err != nil {
			return err
		}
		defer dir.Close()
		name = fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(p))
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return err
	}
	l.SetUnlinkOnClose(false)
	return l.Close()
}

// Release frees the reads blocked opening the FIFO at path: a writer
// opens it and closes it at once, so they get an end of file. It never
// blocks: false when no reader was waiting (an open of a FIFO for writing
// with no reader fails, non-blocking) or path is no FIFO.
func Release(path string) bool {
	w, err := os.OpenFile(path, os.O_WRONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	w.Close()
	return true
}
