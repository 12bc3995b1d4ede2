package surface

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tenantcanary/tenantcanary/internal/hostilefile"
)

// Form is one hostile thing a tenant can leave where the server expects
// one of its own files: what its own sandboxed shell can make in its home.
type Form string

// The hostile forms every file the server reads is given.
const (
	FIFO             = Form(hostilefile.FIFO)       // an open for reading blocks for ever with no writer
	DeviceLink       = Form(hostilefile.DeviceLink) // a link to /dev/zero: a read never ends
	Sparse           = Form(hostilefile.Sparse)     // a huge sparse file (HugeSize), no disk spent
	Directory        = Form(hostilefile.Directory)  // a folder where a file was
	Socket           = Form(hostilefile.Socket)     // a unix socket: an open fails, a connect may hang
	LinkOut     Form = "link-out"                   // a link to the victim's file of the same path
	MiddleLink  Form = "middle-link"                // the path's first folder linked to the victim's
	FileInstead Form = "file-for-folder"            // a regular file where a folder was
)

// Forms lists every form a file the server reads is given, in the order
// they are tried.
func Forms() []Form {
	return []Form{FIFO, DeviceLink, Sparse, Directory, Socket, LinkOut, MiddleLink}
}

// DirForms lists every form a folder the server lists is given: a file
// where it was, the special files, and a link to the victim's folder of
// the same path.
func DirForms() []Form {
	return []Form{FileInstead, FIFO, DeviceLink, Socket, LinkOut}
}

// HugeSize is a sparse file's size: far past any sane limit, and costing
// no disk.
const HugeSize = hostilefile.HugeSize

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
	case LinkOut, MiddleLink:
		made = os.Symlink(filepath.Join(victimHome, filepath.FromSlash(at)), target)
	case FileInstead:
		made = os.WriteFile(target, []byte("a file where a folder was\n"), 0o644)
	default:
		made = hostilefile.Make(target, hostilefile.Form(form))
	}
	if made != nil {
		_ = put()
		return nil, fmt.Errorf("surface: plant %s at %s: %w", form, at, made)
	}
	return put, nil
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

// SwapEvery is how often a Swapper flips its path.
const SwapEvery = time.Millisecond

// Swapper flips a home path between the tenant's own file and a link to
// the victim's file of the same path, as fast as renames go, until
// stopped: a server that checks a file and opens it again later by name
// (a pool of readers, a lazy re-open) follows the link some of the time.
type Swapper struct {
	stop  chan struct{}
	done  chan struct{}
	swaps int
	err   error
}

// StartSwap starts flipping rel under home; aside is a folder of the same
// home (the tenant's own) where it keeps its copies. Stop ends it and puts
// the original back.
func StartSwap(home, rel, victimHome, aside string) (*Swapper, error) {
	p := filepath.Join(home, filepath.FromSlash(path.Clean(rel)))
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("surface: swap %s: %w", rel, ErrNotApplicable)
	}
	dir, err := os.MkdirTemp(aside, "swap-")
	if err != nil {
		return nil, fmt.Errorf("surface: swap %s: %w", rel, err)
	}
	keep := filepath.Join(dir, "keep")
	if err := os.Link(p, keep); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("surface: swap %s: keep the original: %w", rel, err)
	}
	s := &Swapper{stop: make(chan struct{}), done: make(chan struct{})}
	victim := filepath.Join(victimHome, filepath.FromSlash(path.Clean(rel)))
	// The names that are renamed over p live beside it: a rename is atomic
	// only within one folder's file system.
	tmpL, tmpO := p+".surface-swap-link", p+".surface-swap-own"
	go func() {
		defer close(s.done)
		// A flip every SwapEvery: fast enough to land between a check and
		// a later open many times a second, without taking a whole core
		// from the server (and every other scenario) beside it.
		tick := time.NewTicker(SwapEvery)
		defer tick.Stop()
		defer func() {
			_ = os.Remove(tmpL)
			_ = os.Remove(tmpO)
			// The original back at its path, whatever the loop left there.
			if err := os.Link(keep, tmpO); err == nil {
				_ = os.Rename(tmpO, p)
			}
			// A rename between two links of one file does nothing (p was
			// the own file already): the spare name goes.
			_ = os.Remove(tmpO)
			_ = os.RemoveAll(dir)
		}()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			_ = os.Remove(tmpL)
			if err := os.Symlink(victim, tmpL); err != nil {
				s.err = err
				return
			}
			if err := os.Rename(tmpL, p); err != nil {
				s.err = err
				return
			}
			_ = os.Remove(tmpO)
			if err := os.Link(keep, tmpO); err != nil {
				s.err = err
				return
			}
			if err := os.Rename(tmpO, p); err != nil {
				s.err = err
				return
			}
			s.swaps++
		}
	}()
	return s, nil
}

// Stop ends the flipping, puts the original back, and says how many
// round trips it made (and the error that ended it early, if any).
func (s *Swapper) Stop() (int, error) {
	close(s.stop)
	<-s.done
	return s.swaps, s.err
}
