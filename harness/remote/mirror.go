package remote

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
)

// ErrEscapes is Pull's error for a tar entry that would land outside the
// mirror: an absolute name, a "..", or a link whose target lies outside.
var ErrEscapes = errors.New("tar entry escapes the mirror")

// Mirror is a local folder that mirrors the server's home folder
// (Spec.Home): Pull makes it what the server's host holds, Push sends
// it there what changed in it since. Use one Mirror (a pointer) for a
// folder: it remembers what it last pulled.
type Mirror struct {
	Spec  *Spec
	Local string // the local folder

	mu     sync.Mutex
	pulled map[string][sha256.Size]byte // each regular file's bytes as last pulled or pushed
}

// RemotePath is where local, a path in the mirror, lies on the server's
// host; a path outside the mirror is returned as it is.
func (m *Mirror) RemotePath(local string) string {
	rel, err := filepath.Rel(m.Local, local)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return local
	}
	return path.Join(m.Spec.Home, filepath.ToSlash(rel))
}

// Pull streams the server's home folder into the mirror: after it, the
// mirror holds exactly what the folder held (what the folder lacks is
// removed from the mirror; a file whose bytes are unchanged is left as it
// is, so a scan cache keeps it).
func (m *Mirror) Pull(ctx context.Context) error {
	if !m.Spec.Files() {
		return fmt.Errorf("pull: %s", m.Spec.Lacks("files"))
	}
	if err := os.MkdirAll(m.Local, 0o700); err != nil {
		return fmt.Errorf("pull: %w", err)
	}
	root, err := os.OpenRoot(m.Local)
	if err != nil {
		return fmt.Errorf("pull: %w", err)
	}
	defer root.Close()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	m.mu.Lock()
	defer m.mu.Unlock()
	go func() {
		seen, sums, err := extract(root, pr)
		if err == nil {
			err = prune(root, seen)
		}
		if err == nil {
			m.pulled = sums
		}
		// Drain what is left, so the command is not stuck writing.
		_, _ = io.Copy(io.Discard, pr)
		pr.CloseWithError(err)
		done <- err
	}()
	_, runErr := Run(ctx, "remote.pull", m.Spec.Pull, m.Spec.Home, nil, pw)
	pw.Close()
	xerr := <-done
	if runErr != nil {
		return fmt.Errorf("pull %s: %w", m.Spec.Home, runErr)
	}
	if xerr != nil {
		return fmt.Errorf("pull %s: %w", m.Spec.Home, xerr)
	}
	return nil
}

// Pulled is how many regular files the last pull brought (and pushes
// since sent).
func (m *Mirror) Pulled() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.pulled)
}

// Push streams the mirror to the server's home folder: every folder, and
// every file the mirror did not hold as it is when it was last pulled,
// written over what the server's host holds. A file the server keeps
// open (its database) is never written under it unless the harness
// changed it.
func (m *Mirror) Push(ctx context.Context) error {
	if !m.Spec.Files() {
		return fmt.Errorf("push: %s", m.Spec.Lacks("files"))
	}
	root, err := os.OpenRoot(m.Local)
	if err != nil {
		return fmt.Errorf("push: %w", err)
	}
	defer root.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	pushed := map[string][sha256.Size]byte{}
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(archive(root, pw, func(name string, data []byte) bool {
			sum := sha256.Sum256(data)
			if old, ok := m.pulled[name]; ok && old == sum {
				return false
			}
			pushed[name] = sum
			return true
		}))
	}()
	_, err = Run(ctx, "remote.push", m.Spec.Push, m.Spec.Home, pr, nil)
	pr.Close()
	if err != nil {
		return fmt.Errorf("push %s: %w", m.Spec.Home, err)
	}
	if m.pulled == nil {
		m.pulled = map[string][sha256.Size]byte{}
	}
	for k, v := range pushed {
		m.pulled[k] = v
	}
	return nil
}

// entryName is a tar entry's name as a clean path relative to the
// mirror, or ErrEscapes.
func entryName(name string) (string, error) {
	n := strings.TrimPrefix(name, "./")
	if n == "" || n == "." || n == "./" {
		return ".", nil
	}
	if path.IsAbs(n) || strings.Contains(n, "\\") {
		return "", fmt.Errorf("%w: %q is absolute", ErrEscapes, name)
	}
	for _, part := range strings.Split(strings.TrimSuffix(n, "/"), "/") {
		if part == ".." {
			return "", fmt.Errorf("%w: %q goes up (..)", ErrEscapes, name)
		}
	}
	return path.Clean(n), nil
}

// linkInside checks that a link at name (relative to the mirror) pointing
// at target stays in the mirror.
func linkInside(name, target string) error {
	if path.IsAbs(target) {
		return fmt.Errorf("%w: link %q points at %q, an absolute path", ErrEscapes, name, target)
	}
	if t := path.Join(path.Dir(name), target); t == ".." || strings.HasPrefix(t, "../") {
		return fmt.Errorf("%w: link %q points at %q, outside the mirror", ErrEscapes, name, target)
	}
	return nil
}

// extract writes the tar stream r into root and returns the names it
// held (every folder above them included) and the sum of each regular
// file's bytes.
func extract(root *os.Root, r io.Reader) (map[string]bool, map[string][sha256.Size]byte, error) {
	seen := map[string]bool{".": true}
	sums := map[string][sha256.Size]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return seen, sums, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read the tar stream: %w", err)
		}
		name, err := entryName(h.Name)
		if err != nil {
			return nil, nil, err
		}
		for d := name; d != "." && d != "/"; d = path.Dir(d) {
			seen[d] = true
		}
		if err := extractOne(root, tr, h, name, sums); err != nil {
			return nil, nil, err
		}
	}
}

func extractOne(root *os.Root, tr *tar.Reader, h *tar.Header, name string, sums map[string][sha256.Size]byte) error {
	mode := fs.FileMode(h.Mode) & fs.ModePerm
	if dir := path.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("extract %s: %w", name, err)
		}
	}
	switch h.Typeflag {
	case tar.TypeDir:
		if name == "." {
			return nil
		}
		if fi, err := root.Lstat(name); err == nil && !fi.IsDir() {
			_ = root.RemoveAll(name)
		}
		if err := root.MkdirAll(name, mode|0o700); err != nil {
			return fmt.Errorf("extract %s: %w", name, err)
		}
		return nil
	case tar.TypeReg:
		data, err := io.ReadAll(tr)
		if err != nil {
			return fmt.Errorf("extract %s: %w", name, err)
		}
		sums[name] = sha256.Sum256(data)
		if fi, err := root.Lstat(name); err == nil {
			// A tar time has whole seconds: only the bytes say a file is
			// unchanged (left as it is, so a scan cache keeps it).
			if fi.Mode().IsRegular() && fi.Size() == int64(len(data)) {
				if old, err := root.ReadFile(name); err == nil && bytes.Equal(old, data) {
					return nil
				}
			}
			if err := root.RemoveAll(name); err != nil {
				return fmt.Errorf("extract %s: %w", name, err)
			}
		}
		f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode|0o600)
		if err != nil {
			return fmt.Errorf("extract %s: %w", name, err)
		}
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("extract %s: %w", name, err)
		}
		if err := root.Chtimes(name, h.ModTime, h.ModTime); err != nil {
			return fmt.Errorf("extract %s: %w", name, err)
		}
		return nil
	case tar.TypeSymlink:
		if err := linkInside(name, h.Linkname); err != nil {
			return err
		}
		_ = root.RemoveAll(name)
		if err := root.Symlink(h.Linkname, name); err != nil {
			return fmt.Errorf("extract %s: %w", name, err)
		}
		return nil
	case tar.TypeLink:
		target, err := entryName(h.Linkname)
		if err != nil {
			return fmt.Errorf("hard link %q: %w", name, err)
		}
		_ = root.RemoveAll(name)
		if err := root.Link(target, name); err != nil {
			return fmt.Errorf("extract %s: %w", name, err)
		}
		return nil
	}
	// A fifo or a device holds no file's bytes: not mirrored.
	return nil
}

// prune removes from root every entry seen lacks: the mirror then holds
// exactly what the stream did.
func prune(root *os.Root, seen map[string]bool) error {
	var gone []string
	err := fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !seen[p] {
			gone = append(gone, p)
			if d.IsDir() {
				return fs.SkipDir
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("prune the mirror: %w", err)
	}
	for _, p := range gone {
		if err := root.RemoveAll(p); err != nil {
			return fmt.Errorf("prune the mirror: %w", err)
		}
	}
	return nil
}

// archive writes the entries of root as a tar stream on w: every folder
// and link, and each regular file send takes.
func archive(root *os.Root, w io.Writer, send func(name string, data []byte) bool) error {
	tw := tar.NewWriter(w)
	err := fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := root.Lstat(p)
		if err != nil {
			return err
		}
		link := ""
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if link, err = root.Readlink(p); err != nil {
				return err
			}
		case !fi.Mode().IsRegular() && !fi.IsDir():
			return nil // a fifo, a socket: no file's bytes
		}
		var data []byte
		if fi.Mode().IsRegular() {
			if data, err = root.ReadFile(p); err != nil {
				return err
			}
			if !send(p, data) {
				return nil
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Size = int64(len(data))
		h.Name = "./" + p
		if p == "." {
			h.Name = "."
		}
		if fi.IsDir() {
			h.Name += "/"
		}
		h.Uname, h.Gname, h.Uid, h.Gid = "", "", 0, 0
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err != nil {
		return fmt.Errorf("archive the mirror: %w", err)
	}
	return tw.Close()
}
