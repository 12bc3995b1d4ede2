package homefs

import (
	"errors"
	"io/fs"

	"golang.org/x/sys/unix"
)

// ID is what identifies one version of a home file on disk: a change of
// its content by a write in place changes its size, mtime or ctime; a
// replacement (a rename over it, agentd's own writes) changes its inode.
// The zero ID is a missing file.
type ID struct {
	Dev, Ino     uint64
	Mode         uint32
	Size         int64
	Mtime, Ctime int64 // nanoseconds since the epoch
}

// Present reports whether id is a file's (not the zero ID of none).
func (id ID) Present() bool { return id != ID{} }

func idOf(st *unix.Stat_t) ID {
	return ID{Dev: st.Dev, Ino: st.Ino, Mode: st.Mode, Size: st.Size, Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano()}
}

// Stat is the ID of the home file name as it is now, without opening it
// (fstatat, no link followed: a link's own ID): cheap whatever the file
// is or holds. A missing file (or folder on the way) is the zero ID.
// Under home-follows-links it is the ID of what a link leads to.
func (h Home) Stat(name string) (ID, error) {
	if err := checkName(name); err != nil {
		return ID{}, err
	}
	var st unix.Stat_t
	if h.FollowLinks {
		if err := unix.Stat(h.Path(name), &st); err != nil { // the fault: links followed
			return statErr(h, name, err)
		}
		return idOf(&st), nil
	}
	dir, base := split(name)
	dfd, err := h.walk(name, dir, false, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return ID{}, nil
	}
	if err != nil {
		return ID{}, err
	}
	defer unix.Close(dfd)
	if err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return statErr(h, name, err)
	}
	return idOf(&st), nil
}

func statErr(h Home, name string, err error) (ID, error) {
	if err == unix.ENOENT || err == unix.ENOTDIR {
		return ID{}, nil
	}
	return ID{}, &fs.PathError{Op: "lstat", Path: h.Path(name), Err: err}
}
