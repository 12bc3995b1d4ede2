package server

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/tenantcanary/tenantcanary/agentd/profile"
)

// keyCache holds each profile's API_SERVER_KEY (its SHA-256) for as long
// as its .env is the same file unchanged: the key is read again whenever
// the file's identity (device, inode, size, modification and change
// times, from a stat through the home) differs from when it was read.
// Every call of a tenant connection checks its credential, so reading and
// parsing .env each time would cost every call a file read.
type keyCache struct {
	mu sync.Mutex
	m  map[string]cachedKey // by the .env's path, valid while its identity holds
}

type fileID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime syscall.Timespec
}

type cachedKey struct {
	id    fileID
	sum   [sha256.Size]byte
	found bool
	racy  bool // read within racyWindow of the file's last change: read it again
}

// racyWindow is how recent a .env's last change may be for its read to
// be used once only: a write in place within the file system's timestamp
// tick of the read, of the same size, would leave its identity unchanged
// (git's "racily clean" entries), so such a read is not kept.
const racyWindow = 2 * time.Second

// recent reports whether the file at id changed within racyWindow.
func (id fileID) recent() bool {
	last := max(id.mtime.Nano(), id.ctime.Nano())
	return time.Since(time.Unix(0, last)) < racyWindow
}

// tenantKey is the SHA-256 of p's API_SERVER_KEY; found is false when it
// has none (no .env, no such variable, or an empty one).
func (k *keyCache) tenantKey(p profile.Profile) (sum [sha256.Size]byte, found bool, err error) {
	id, exists, err := envIdentity(p)
	if err != nil || !exists {
		return sum, false, err
	}
	path := p.File(".env")
	k.mu.Lock()
	c, ok := k.m[path]
	k.mu.Unlock()
	if ok && c.id == id && !c.racy {
		return c.sum, c.found, nil
	}
	// Stat first, read second: a write in between changes the identity,
	// so the next check reads the file again.
	env, err := p.LoadEnv()
	if err != nil {
		return sum, false, err
	}
	key, found := env.Lookup(TenantKeyEnv)
	found = found && key != ""
	if found {
		sum = sha256.Sum256([]byte(key))
	}
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]cachedKey{}
	}
	k.m[path] = cachedKey{id: id, sum: sum, found: found, racy: id.recent()}
	k.mu.Unlock()
	return sum, found, nil
}

// envIdentity stats p's .env through its home (no link followed, a
// regular file only); exists is false when there is none.
func envIdentity(p profile.Profile) (id fileID, exists bool, err error) {
	f, err := p.FS().OpenFile(".env", os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return id, false, nil
	}
	if err != nil {
		return id, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return id, false, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return id, false, fmt.Errorf("stat .env of profile %q: no file identity", p.Name)
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}, true, nil
}
