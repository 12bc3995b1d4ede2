//go:build linux

package surface

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watchMask is every inotify event the map records.
const watchMask = unix.IN_OPEN | unix.IN_ACCESS | unix.IN_MODIFY | unix.IN_CLOSE_WRITE |
	unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_ATTRIB |
	unix.IN_EXCL_UNLINK

// watcher watches every folder of some homes with inotify and hands each
// event, named by tenant and home-relative path, to its sink.
type watcher struct {
	f    *os.File // the inotify descriptor, in Go's poller: Close ends Read
	fd   int      // the same, for inotify_add_watch (f.Fd would make f blocking)
	sink func(Touch)
	done chan struct{}

	homes map[string]string // every watched home -> its tenant: a home nested in another is its own

	mu       sync.Mutex
	dirs     map[int]place // watch descriptor -> folder
	overflow bool
	err      error
}

// place is a watched folder: its tenant and path relative to the home.
type place struct {
	tenant, home, rel string
}

// newWatcher watches homes (tenant -> home folder) and every folder below
// them, and the folders made later.
func newWatcher(homes map[string]string, sink func(Touch)) (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("surface: inotify: %w", err)
	}
	w := &watcher{f: os.NewFile(uintptr(fd), "inotify"), fd: fd, sink: sink, done: make(chan struct{}), dirs: map[int]place{}, homes: map[string]string{}}
	for tenant, home := range homes {
		w.homes[filepath.Clean(home)] = tenant
	}
	for tenant, home := range homes {
		if err := w.addTree(place{tenant: tenant, home: home}); err != nil {
			w.f.Close()
			return nil, err
		}
	}
	go w.read()
	return w, nil
}

// addTree watches p's folder and every folder below it (links not
// followed: a link out of the home is not the home).
func (w *watcher) addTree(p place) error {
	root := filepath.Join(p.home, p.rel)
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == root {
				return fmt.Errorf("surface: watch %s of %s: %w", root, p.tenant, err)
			}
			return nil // gone since listed, or unreadable: not the server's
		}
		if !d.IsDir() {
			return nil
		}
		if owner, ok := w.homeOf(path); ok && path != filepath.Clean(p.home) {
			// Another tenant's home (a profile below the launch home), maybe
			// made just now: watched as its own.
			if owner != p.tenant {
				_ = w.addTree(place{tenant: owner, home: filepath.Clean(path)})
			}
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(p.home, path)
		if rel == "." {
			rel = ""
		}
		return w.add(place{tenant: p.tenant, home: p.home, rel: filepath.ToSlash(rel)})
	})
}

// homeOf says whose home path is, if it is one.
func (w *watcher) homeOf(path string) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.homes[filepath.Clean(path)]
	return t, ok
}

// watchHome adds tenant's home, which may not exist yet (a profile about
// to be created below a watched home): from now on its events are its
// own, not the enclosing home's.
func (w *watcher) watchHome(tenant, home string) error {
	home = filepath.Clean(home)
	w.mu.Lock()
	w.homes[home] = tenant
	w.mu.Unlock()
	if _, err := os.Lstat(home); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return w.addTree(place{tenant: tenant, home: home})
}

func (w *watcher) add(p place) error {
	wd, err := unix.InotifyAddWatch(w.fd, filepath.Join(p.home, p.rel), watchMask|unix.IN_ONLYDIR|unix.IN_DONT_FOLLOW)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return nil
		}
		return fmt.Errorf("surface: watch %s of %s: %w", p.rel, p.tenant, err)
	}
	w.mu.Lock()
	w.dirs[wd] = p
	w.mu.Unlock()
	return nil
}

// read turns inotify records into Touches until the descriptor closes.
func (w *watcher) read() {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				w.mu.Lock()
				w.err = err
				w.mu.Unlock()
			}
			return
		}
		w.parse(buf[:n])
	}
}

func (w *watcher) parse(b []byte) {
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			return
		}
		name := strings.TrimRight(string(b[unix.SizeofInotifyEvent:end]), "\x00")
		b = b[end:]
		if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
			w.mu.Lock()
			w.overflow = true
			w.mu.Unlock()
			continue
		}
		w.mu.Lock()
		p, ok := w.dirs[int(ev.Wd)]
		if ev.Mask&unix.IN_IGNORED != 0 {
			delete(w.dirs, int(ev.Wd))
		}
		w.mu.Unlock()
		if !ok || ev.Mask&unix.IN_IGNORED != 0 {
			continue
		}
		rel := p.rel
		if name != "" {
			rel = path.Join(p.rel, name)
		}
		dir := ev.Mask&unix.IN_ISDIR != 0
		if dir && ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
			_ = w.addTree(place{tenant: p.tenant, home: p.home, rel: rel})
		}
		for _, op := range opsOf(ev.Mask) {
			w.sink(Touch{Tenant: p.tenant, Path: rel, Op: op, Dir: dir})
		}
	}
}

// opsOf names the operations an event mask holds.
func opsOf(mask uint32) []Op {
	var ops []Op
	for _, m := range []struct {
		bit uint32
		op  Op
	}{{unix.IN_OPEN, Opened}, {unix.IN_ACCESS, Read}, {unix.IN_MODIFY, Written}, {unix.IN_CLOSE_WRITE, Written},
		{unix.IN_CREATE, Created}, {unix.IN_DELETE, Deleted}, {unix.IN_MOVED_FROM, Renamed}, {unix.IN_MOVED_TO, Renamed},
		{unix.IN_ATTRIB, Attrib}} {
		if mask&m.bit != 0 && !contains(ops, m.op) {
			ops = append(ops, m.op)
		}
	}
	return ops
}

func contains(ops []Op, op Op) bool {
	for _, o := range ops {
		if o == op {
			return true
		}
	}
	return false
}

// state reports a queue overflow (events were lost) and a read error.
func (w *watcher) state() (overflow bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.overflow, w.err
}

// close stops the watcher and waits for its reader.
func (w *watcher) close() {
	_ = w.f.Close()
	<-w.done
}
