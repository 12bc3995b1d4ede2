package server

import (
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/agentd/homefs"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
)

// racyWindow is how recent a .env's change may be for its read to be kept
// only until the next lookup: a write in place within the file system's
// timestamp tick of the read (same size) would leave its ID unchanged, so
// a read that close to the last change is not trusted (git's "racy"
// entries).
const racyWindow = 2 * time.Second

// credIndex keeps each profile's tenant credential (TenantKeyEnv of its
// .env) with the ID of the .env it was read from. A lookup stats each
// .env (fstatat: the same cost whatever the file is) and reads only the
// ones that changed since, through the home (no link followed, nothing
// that blocks, no more than homefs.MaxEnvSize), so a tenant's huge,
// special or ever-changing .env costs another tenant's connect one stat,
// never a read of it. The server's own writes (model.save_key) rename a
// new file over .env: a new inode, so a new ID.
type credIndex struct {
	mu      sync.Mutex
	entries map[string]credEntry // by profile home
}

// credEntry is one .env as last read.
type credEntry struct {
	id   homefs.ID // of the file read (or, unread, of what was there)
	key  string    // "" when none (or the file was refused)
	racy bool      // read within racyWindow of its change: read it again
}

// keyOf is p's tenant credential now: read again only when its .env
// changed since the last read ("" when it has none, or an unreadable one).
func (x *credIndex) keyOf(p profile.Profile) string {
	id, err := p.FS().Stat(".env")
	if err != nil {
		return ""
	}
	x.mu.Lock()
	e, ok := x.entries[p.Home]
	x.mu.Unlock()
	if ok && !e.racy && e.id == id {
		return e.key
	}
	e = readCredential(p, id)
	x.mu.Lock()
	if x.entries == nil {
		x.entries = map[string]credEntry{}
	}
	x.entries[p.Home] = e
	x.mu.Unlock()
	return e.key
}

// readCredential reads p's .env, which was at id when statted.
func readCredential(p profile.Profile, id homefs.ID) credEntry {
	if !id.Present() {
		return credEntry{}
	}
	data, readID, err := p.FS().ReadFileID(".env")
	if err != nil {
		// Refused (a link, a FIFO, a folder, too large) or gone: no key,
		// and not read again until what is there changes.
		return credEntry{id: id, racy: recent(id)}
	}
	e := credEntry{id: readID, racy: recent(readID)}
	env, err := profile.ParseEnv(p.File(".env"), data)
	if err == nil {
		e.key, _ = env.Lookup(TenantKeyEnv)
	}
	return e
}

// recent reports whether the file at id changed within racyWindow.
func recent(id homefs.ID) bool {
	last := time.Unix(0, max(id.Mtime, id.Ctime))
	return time.Since(last) < racyWindow
}

// forget drops the entries of homes not in keep (profiles deleted).
func (x *credIndex) forget(keep []profile.Profile) {
	live := make(map[string]bool, len(keep))
	for _, p := range keep {
		live[p.Home] = true
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for home := range x.entries {
		if !live[home] {
			delete(x.entries, home)
		}
	}
}
