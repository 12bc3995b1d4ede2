package homefs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

var (
	// ErrLink marks a symlink found where agentd opens a home file or
	// folder: agentd follows no symlink in a home.
	ErrLink = errors.New("agentd follows no symlink in a home")
	// ErrLinkOut marks a symlink (or a path) that leads out of the home.
	// Every ErrLinkOut is also an ErrLink.
	ErrLinkOut = errors.New("link out of the home")
	// ErrNotRegular marks a home file that is not a regular file (a FIFO,
	// a device, a socket, a folder where a file belongs).
	ErrNotRegular = errors.New("not a regular file")
	// ErrBadName marks a name that is not a local path of the home
	// (absolute, or with "..").
	ErrBadName = errors.New("not a path inside the home")
)

// LinkError is a refused symlink: Name is the home file (relative to the
// home) whose path holds the link. It matches ErrLink, and ErrLinkOut when
// the link leaves the home.
type LinkError struct {
	Name string // the home file asked for
	At   string // the component that is a link (a prefix of Name)
	Out  bool   // the link resolves outside the home
}

func (e *LinkError) Error() string {
	where := e.Name
	if e.At != "" && e.At != e.Name {
		where = fmt.Sprintf("%s (at %s)", e.Name, e.At)
	}
	if e.Out {
		return fmt.Sprintf("home file %s is a link out of the home: %v", where, ErrLink)
	}
	return fmt.Sprintf("home file %s is a symlink: %v", where, ErrLink)
}

// Is makes errors.Is(err, ErrLink) and, for a link out, ErrLinkOut true.
func (e *LinkError) Is(target error) bool {
	return target == ErrLink || (e.Out && target == ErrLinkOut)
}

// Home is one profile's home (or any folder agentd owns on a tenant's
// behalf). The zero FollowLinks is the defence; true is the seeded fault
// home-follows-links.
type Home struct {
	Dir         string // absolute path of the home
	FollowLinks bool   // the home-follows-links fault: plain paths, links followed
	// SpecialFiles is the home-special-files fault (test-only): files are
	// opened blocking, need not be regular and are read whole, whatever
	// their size, as agentd 0.14.1 read the files it read lazily.
	SpecialFiles bool
}

// Path is the plain path of name in the home, for messages and for
// programs that take a path (never for opening it: use the methods).
func (h Home) Path(name string) string { return filepath.Join(h.Dir, filepath.FromSlash(name)) }

func checkName(name string) error {
	if name == "." {
		return nil
	}
	if !filepath.IsLocal(filepath.FromSlash(name)) || strings.Contains(name, "\\") {
		return fmt.Errorf("home file %q: %w", name, ErrBadName)
	}
	return nil
}

// split is name's folder ("." at the top) and last component.
func split(name string) (dir, base string) {
	name = path.Clean(name)
	dir, base = path.Split(name)
	if dir == "" {
		return ".", base
	}
	return path.Clean(dir), base
}

// walk opens the folder dir of the home one component at a time, never
// following a link; create makes missing folders with perm. name is the
// file asked for, for messages.
func (h Home) walk(name, dir string, create bool, perm fs.FileMode) (int, error) {
	fd, err := unix.Open(h.Dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open home", Path: h.Dir, Err: err}
	}
	if dir == "." {
		return fd, nil
	}
	done := ""
	for _, part := range strings.Split(dir, "/") {
		done = path.Join(done, part)
		nfd, err := openat(fd, part, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOENT && create {
			if err = unix.Mkdirat(fd, part, uint32(perm.Perm())); err == nil || err == unix.EEXIST {
				nfd, err = openat(fd, part, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			}
		}
		if err != nil {
			ferr := h.refusal(fd, name, done, part, err)
			unix.Close(fd)
			return -1, ferr
		}
		unix.Close(fd)
		fd = nfd
	}
	return fd, nil
}

// openat retries on EINTR.
func openat(dirfd int, name string, flags int, perm uint32) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, flags, perm)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// refusal explains a failed openat of part (in dirfd; done is its path in
// the home): a symlink becomes a *LinkError, anything else a PathError.
func (h Home) refusal(dirfd int, name, done, part string, err error) error {
	if err == unix.ELOOP || err == unix.ENOTDIR || err == unix.EEXIST || err == unix.EMLINK {
		var st unix.Stat_t
		if unix.Fstatat(dirfd, part, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return &LinkError{Name: name, At: done, Out: h.leaves(done)}
		}
	}
	if err == unix.EISDIR || err == unix.ENXIO || err == unix.ENODEV || err == unix.EOPNOTSUPP {
		// A folder opened for writing, a socket, a FIFO opened for
		// writing with no reader, a device with no driver: each is no
		// regular file, whatever the open said.
		var st unix.Stat_t
		if unix.Fstatat(dirfd, part, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
			return fmt.Errorf("home file %s: %w (agentd reads and writes only regular files in a home)", name, ErrNotRegular)
		}
	}
	return &fs.PathError{Op: "open", Path: h.Path(name), Err: err}
}

// leaves reports whether the link at done resolves outside the home, as
// os.Root judges it (a dangling link inside the home does not leave).
func (h Home) leaves(done string) bool {
	r, err := os.OpenRoot(h.Dir)
	if err != nil {
		return true
	}
	defer r.Close()
	_, err = r.Stat(done)
	return IsEscape(err)
}

// IsEscape reports whether err is os.Root's refusal of a path that leaves
// its root ("path escapes from parent"; the error value is unexported).
func IsEscape(err error) bool {
	var pe *fs.PathError
	for err != nil {
		if errors.As(err, &pe) {
			if pe.Err != nil && pe.Err.Error() == "path escapes from parent" {
				return true
			}
			err = pe.Err
			continue
		}
		return false
	}
	return false
}

// OpenFile opens name like os.OpenFile, beneath the home and following no
// link; missing folders on the way are created when flag has O_CREATE. The
// file must be a regular file: the open never blocks (O_NONBLOCK, cleared
// once the descriptor is known to be a regular file), so a FIFO planted
// where a file belongs is refused at once, as is a device or a folder.
func (h Home) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if !h.SpecialFiles {
		flag |= unix.O_NONBLOCK
	}
	if h.FollowLinks {
		if flag&os.O_CREATE != 0 {
			_ = os.MkdirAll(filepath.Dir(h.Path(name)), 0o700)
		}
		f, err := os.OpenFile(h.Path(name), flag, perm) // the fault: links followed
		if err != nil {
			return nil, err
		}
		return h.regularOnly(f, name)
	}
	dir, base := split(name)
	dfd, err := h.walk(name, dir, flag&os.O_CREATE != 0, 0o700)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	fd, err := openat(dfd, base, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return nil, h.refusal(dfd, name, name, base, err)
	}
	return h.regularOnly(os.NewFile(uintptr(fd), h.Path(name)), name)
}

// regularOnly is f, the home file name just opened, when it is a regular
// file, judged on the descriptor itself (what was opened, not what the
// path names now), with O_NONBLOCK cleared; otherwise f is closed and the
// error wraps ErrNotRegular. Under the home-special-files fault f is
// taken as it is.
func (h Home) regularOnly(f *os.File, name string) (*os.File, error) {
	if h.SpecialFiles {
		return f, nil
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open home file %s: %w", name, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("home file %s: %w (agentd reads and writes only regular files in a home)", name, ErrNotRegular)
	}
	sc, err := f.SyscallConn()
	if err == nil {
		cerr := sc.Control(func(fd uintptr) { err = unix.SetNonblock(int(fd), false) })
		err = errors.Join(cerr, err)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open home file %s: fcntl: %w", name, err)
	}
	return f, nil
}

// ReadFile reads name whole (see OpenFile), up to its kind's limit
// (LimitOf): a larger file is refused with an error matching ErrTooLarge.
// A missing file is an error matching fs.ErrNotExist.
func (h Home) ReadFile(name string) ([]byte, error) {
	return h.ReadFileLimit(name, LimitOf(name))
}

// ReadFileLimit is ReadFile with the limit given.
func (h Home) ReadFileLimit(name string, limit int64) ([]byte, error) {
	f, err := h.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return h.readOpened(f, name, limit)
}

// readOpened reads f, the home file name, up to limit (see readLimited).
func (h Home) readOpened(f *os.File, name string, limit int64) ([]byte, error) {
	if h.SpecialFiles {
		b, err := io.ReadAll(f) // the fault: whatever it is, however large
		if err != nil {
			return nil, fmt.Errorf("read home file %s: %w", name, err)
		}
		return b, nil
	}
	return readLimited(f, name, limit)
}

// WriteFileAtomic writes data to a new temporary file beside name, syncs
// it and renames it over name, so a reader sees the old file or the new
// one. The rename replaces whatever name was (a link is replaced, never
// written through); missing folders are created.
func (h Home) WriteFileAtomic(name string, data []byte, perm fs.FileMode) error {
	if err := checkName(name); err != nil {
		return err
	}
	if h.FollowLinks {
		return writeAtomicPath(h.Path(name), data, perm) // the fault: links followed
	}
	dir, base := split(name)
	dfd, err := h.walk(name, dir, true, 0o700)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	defer unix.Close(dfd)
	tmp := "." + base + ".tmp-" + randHex()
	fd, err := openat(dfd, tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return fmt.Errorf("write %s: %w", h.Path(name), err)
	}
	f := os.NewFile(uintptr(fd), h.Path(path.Join(dir, tmp)))
	werr := func() error {
		if _, err := f.Write(data); err != nil {
			return err
		}
		if err := f.Chmod(perm); err != nil {
			return err
		}
		return f.Sync()
	}()
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = unix.Renameat(dfd, tmp, dfd, base)
	}
	if werr != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		return fmt.Errorf("write %s: %w", h.Path(name), werr)
	}
	return nil
}

// writeAtomicPath is WriteFileAtomic by plain path (the fault's way, and
// v0.3.0's).
func writeAtomicPath(p string, data []byte, perm fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	tmp := filepath.Join(filepath.Dir(p), "."+filepath.Base(p)+".tmp-"+randHex())
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}

func randHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// MkdirAll makes the folder name and its parents, following no link.
func (h Home) MkdirAll(name string, perm fs.FileMode) error {
	if err := checkName(name); err != nil {
		return err
	}
	if h.FollowLinks {
		return os.MkdirAll(h.Path(name), perm)
	}
	fd, err := h.walk(name, path.Clean(name), true, perm)
	if err != nil {
		return fmt.Errorf("create folder: %w", err)
	}
	unix.Close(fd)
	return nil
}

// OpenDir opens the folder name (O_NOFOLLOW at every step), for a caller
// that must pin it (SQLite opens its files by path: /proc/self/fd/N/...).
func (h Home) OpenDir(name string) (*os.File, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if h.FollowLinks {
		return os.Open(h.Path(name))
	}
	fd, err := h.walk(name, path.Clean(name), false, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), h.Path(name)), nil
}

// ReadDir lists the folder name (see OpenDir), sorted by name. A folder
// with more than MaxDirEntries entries is refused (ErrTooLarge) without
// reading the rest of it.
func (h Home) ReadDir(name string) ([]fs.DirEntry, error) {
	f, err := h.OpenDir(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := f.ReadDir(MaxDirEntries + 1)
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("list %s: %w", h.Path(name), err)
	}
	if len(entries) > MaxDirEntries && !h.SpecialFiles {
		return nil, &TooLargeError{Name: name, Limit: MaxDirEntries, Dir: true}
	}
	if h.SpecialFiles {
		rest, err := f.ReadDir(-1)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", h.Path(name), err)
		}
		entries = append(entries, rest...)
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, nil
}

// CheckFile reports whether name exists as a regular file: false for a
// missing file, an error for a link (ErrLink, ErrLinkOut) or anything
// that is not a regular file (ErrNotRegular).
func (h Home) CheckFile(name string) (bool, error) {
	if err := checkName(name); err != nil {
		return false, err
	}
	if h.FollowLinks {
		st, err := os.Stat(h.Path(name)) // the fault: links followed
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return st.Mode().IsRegular(), nil
	}
	dir, base := split(name)
	dfd, err := h.walk(name, dir, false, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			return false, nil
		}
		return false, &fs.PathError{Op: "lstat", Path: h.Path(name), Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return true, nil
	case unix.S_IFLNK:
		return false, &LinkError{Name: name, At: name, Out: h.leaves(name)}
	default:
		return false, fmt.Errorf("home file %s: %w (agentd reads and writes only regular files in a home)", name, ErrNotRegular)
	}
}

// Remove removes the file (or empty folder) name; a link is removed
// itself, never its target.
func (h Home) Remove(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if h.FollowLinks {
		return os.Remove(h.Path(name))
	}
	dir, base := split(name)
	dfd, err := h.walk(name, dir, false, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	err = unix.Unlinkat(dfd, base, 0)
	if err == unix.EISDIR {
		err = unix.Unlinkat(dfd, base, unix.AT_REMOVEDIR)
	}
	if err != nil {
		return &fs.PathError{Op: "remove", Path: h.Path(name), Err: err}
	}
	return nil
}

// Open opens the file or folder name for reading (see OpenFile and
// OpenDir): a Home is an fs.FS (and an fs.ReadDirFS and fs.ReadFileFS,
// with ReadDir's and ReadFile's limits), for code that walks a tenant's
// folder without knowing of homes (pluginload.DiscoverFS).
func (h Home) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	f, err := h.OpenFile(name, os.O_RDONLY, 0)
	if err == nil || !errors.Is(err, ErrNotRegular) {
		return f, err
	}
	d, derr := h.OpenDir(name) // O_DIRECTORY: a FIFO or device fails without opening
	if derr != nil {
		return nil, err
	}
	return d, nil
}

var (
	_ fs.ReadDirFS  = Home{}
	_ fs.ReadFileFS = Home{}
)
