package scenarios

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/internal/placeholder"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// A chain row is credited only with what it caused itself (chainRows).
// Three things see to it, besides its window:
//
//   - its own canary: {write} is minted afresh for each chain run, of a
//     kind naming the row (chainRowKind), so the attacker's canary found
//     elsewhere is the row's only when it is this one, never one an
//     earlier row left;
//   - a clean slate: the victim's files the row reaches (Chain.Touches)
//     are kept as they were when it began, and put back when it ends
//     (once more after the next stop of the server, which may have held
//     one open and written on): what the row wrote there is reported for
//     it first, and the next row starts from the victim's own files;
//   - what the attacker's own files held when the row began (stale): a
//     tenant whose canaries were already there (an earlier row's
//     leftovers, in what the server feeds the attacker's requests) cannot
//     be the row's finding.

// chainRowKind is the kind of the write canary minted for one run of the
// chain id.
func chainRowKind(id string) tenants.Kind {
	return tenants.Kind("chain_" + strings.ReplaceAll(id, "-", "_"))
}

// feedFiles are the home files (tenants.FileNames' yaml names) the server
// reads into a tenant's requests and replies, and which a clean slate
// keeps: small text files (a database or a log the server writes all the
// time is never put back under it).
var feedFiles = []string{"soul", "memory", "config", "env", "jobs"}

// slateFile is one home file as it was when a row began.
type slateFile struct {
	t      *tenants.Tenant
	rel    string // beneath t's home
	data   []byte
	exists bool
}

// beginRow notes what r starts from: the victim's files it reaches (its
// clean slate) and the tenants whose canaries its attacker's own files
// already hold.
func (e *Env) beginRow(r *chainRun) {
	e.T.Helper()
	r.stale = e.staleOwners(r)
	_, victim := r.ch.Touches()
	r.slate = e.keepFeed(r, r.v, victim, false)
}

// keepFeed reads tenant t's feed files among names (the placeholders
// r.vars fills) as they are now, beneath its home. A file that is not a
// regular one (a link, a folder) is an error, unless skipOthers: then it
// is left to whoever put it there.
func (e *Env) keepFeed(r *chainRun, t *tenants.Tenant, names []string, skipOthers bool) []slateFile {
	e.T.Helper()
	var out []slateFile
	for _, name := range names {
		if !slices.Contains(feedFiles, name) || r.vars[name] == "" {
			continue
		}
		data, exists, err := readHomeFile(t.Home, r.vars[name])
		switch {
		case skipOthers && errors.Is(err, errNotRegular):
			continue
		case err != nil:
			e.T.Errorf("chain %s: keep %s's %s: %v", r.ch.ID, t.Name, r.vars[name], err)
			continue
		}
		out = append(out, slateFile{t: t, rel: r.vars[name], data: data, exists: exists})
	}
	return out
}

// staleSet is what the attacker's home held of other tenants' canaries
// as a row began (an earlier row's leftovers).
type staleSet struct {
	feed  map[string]bool            // owners, in the files the server feeds its requests from
	files map[string]map[string]bool // path (a database's WAL as the database) -> owners
}

// has reports whether f's canary may be a leftover: its owner's canaries
// were in the attacker's feed files, or in f's own file, as the row began.
func (s *staleSet) has(f invariants.Finding) bool {
	return s.feed[f.Owner] || f.Where.Path != "" && s.files[dbFile(f.Where.Path)][f.Owner]
}

// dbFile names a database's WAL, shared memory or journal as the
// database (its pages move from one to the other).
func dbFile(p string) string {
	for _, suffix := range []string{"-wal", "-shm", "-journal"} {
		if strings.HasSuffix(p, suffix) {
			return strings.TrimSuffix(p, suffix)
		}
	}
	return p
}

// staleOwners scans r's attacker's home (not the homes within it, nor
// what its links lead to) for other tenants' canaries.
func (e *Env) staleOwners(r *chainRun) *staleSet {
	e.T.Helper()
	chk, err := invariants.NewChecker(e.Box.Set.Tenants)
	if err != nil {
		e.T.Fatalf("%v", err)
	}
	// Every row scans the attacker's home again; most of its files (its
	// databases above all) did not change since the last row's scan.
	chk.WithFileCache(e.fileCache())
	feed := map[string]bool{}
	for _, name := range feedFiles {
		if rel := r.vars[name]; rel != "" {
			feed[filepath.Join(r.a.Home, rel)] = true
		}
	}
	s := &staleSet{feed: map[string]bool{}, files: map[string]map[string]bool{}}
	for _, f := range chk.Inherited(e.Ctx, r.a.Name, r.a.Home) {
		if f.Invariant != invariants.File || f.Owner == "" || f.Owner == r.a.Name || e.inOtherHome(r.a, f.Where.Path) {
			continue
		}
		p := dbFile(f.Where.Path)
		if s.files[p] == nil {
			s.files[p] = map[string]bool{}
		}
		s.files[p][f.Owner] = true
		if feed[f.Where.Path] {
			s.feed[f.Owner] = true
		}
	}
	return s
}

// inOtherHome reports whether path, beneath t's home, lies in the home of
// another tenant within it (the launch home holds the profiles').
func (e *Env) inOtherHome(t *tenants.Tenant, path string) bool {
	for _, o := range e.Box.Set.Tenants {
		if o != t && len(o.Home) > len(t.Home) && within(path, o.Home) {
			return true
		}
	}
	return false
}

// putSlate reports what r wrote into the victim's files it reaches (the
// attacker's canaries in what was not there when it began) as r's own
// findings, then puts each file back as it was. It may run again (after
// the server's next stop): each time, what was added since is r's.
func (e *Env) putSlate(r *chainRun) {
	e.T.Helper()
	if len(r.slate) == 0 {
		return
	}
	chk, err := invariants.NewChecker(e.Box.Set.Tenants)
	if err != nil {
		e.T.Fatalf("%v", err)
	}
	e.putBack(r, r.slate, func(s slateFile, now []byte) {
		for _, f := range addedHits(chk, s, now, r.a.Name) {
			e.chainFind(r, f)
		}
	})
}

// putBack writes each of files back as it was kept, where it changed
// (a link or a folder in its place is removed), beneath its tenant's home;
// changed, when set, sees what the file held first.
func (e *Env) putBack(r *chainRun, files []slateFile, changed func(s slateFile, now []byte)) {
	e.T.Helper()
	for _, s := range files {
		now, exists, err := readHomeFile(s.t.Home, s.rel)
		if err != nil && !errors.Is(err, errNotRegular) {
			e.T.Errorf("chain %s: read %s's %s: %v", r.ch.ID, s.t.Name, s.rel, err)
			continue
		}
		if err == nil && exists == s.exists && bytes.Equal(now, s.data) {
			continue
		}
		if changed != nil {
			changed(s, now)
		}
		if err := putHomeFile(s.t.Home, s.rel, s.data, s.exists); err != nil {
			e.T.Errorf("chain %s: put back %s's %s: %v", r.ch.ID, s.t.Name, s.rel, err)
		}
	}
}

// addedHits are the file findings of owner's canaries in now that s's
// content did not hold: past its end when now still begins with it, else
// of a canary s's content did not carry at all.
func addedHits(chk *invariants.Checker, s slateFile, now []byte, owner string) []invariants.Finding {
	path := filepath.Join(s.t.Home, s.rel)
	var from int64
	before := map[string]bool{}
	if s.exists && bytes.HasPrefix(now, s.data) {
		from = int64(len(s.data))
	} else {
		for _, f := range chk.TextLeaks(path, s.data, s.t.Name) {
			before[f.Owner+"/"+string(f.Kind)] = true
		}
	}
	var out []invariants.Finding
	for _, f := range chk.TextLeaks(path, now, s.t.Name) {
		if f.Owner != owner || f.Where.Offset == nil || *f.Where.Offset < from || before[f.Owner+"/"+string(f.Kind)] {
			continue
		}
		f.Invariant = invariants.File
		f.Where = invariants.Where{Path: path, Offset: f.Where.Offset}
		f.Detail = "written while the chain ran (kept before the harness put the file back)"
		out = append(out, f)
	}
	return out
}

var errNotRegular = errors.New("not a regular file")

// readHomeFile reads rel beneath home without following a link anywhere on
// the way (a home is the tenant's to fill with links): a file that is not
// there is (nil, false, nil); a link or a folder is errNotRegular.
func readHomeFile(home, rel string) ([]byte, bool, error) {
	root, err := os.OpenRoot(home)
	if err != nil {
		return nil, false, fmt.Errorf("open home %s: %w", home, err)
	}
	defer root.Close()
	st, err := root.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	case !st.Mode().IsRegular():
		return nil, true, fmt.Errorf("%s: %w (%s)", rel, errNotRegular, st.Mode().Type())
	}
	data, err := root.ReadFile(rel)
	return data, true, err
}

// putHomeFile makes rel beneath home hold data (a link or a folder there
// is removed first, never followed), or removes it when it did not exist.
func putHomeFile(home, rel string, data []byte, exists bool) error {
	root, err := os.OpenRoot(home)
	if err != nil {
		return fmt.Errorf("open home %s: %w", home, err)
	}
	defer root.Close()
	if st, err := root.Lstat(rel); err == nil && (!exists || !st.Mode().IsRegular()) {
		if err := root.RemoveAll(rel); err != nil {
			return err
		}
	}
	if !exists {
		return nil
	}
	return root.WriteFile(rel, data, 0o600)
}

// keepOwn copies the attacker's own feed files r's chain restores
// (Chain.Restore), before its steps. A folder or a link there is the
// shell's to set aside ("<file>.chain-bak"), and so is a database or a
// log: the server may hold it open and write on into the file set aside,
// so a copy written back would not match what it wrote.
func (e *Env) keepOwn(r *chainRun) []slateFile {
	e.T.Helper()
	names := make([]string, 0, len(r.ch.Restore))
	for _, rel := range r.ch.Restore {
		names = append(names, placeholder.Sole(rel))
	}
	return e.keepFeed(r, r.a, names, true)
}

// restoreOwn puts back the attacker's home files r's steps replaced or
// edited (a link removed, "<file>.chain-bak" renamed back, the harness's
// copy written back), beneath its home, following no link.
func (e *Env) restoreOwn(r *chainRun) {
	e.T.Helper()
	root, err := os.OpenRoot(r.a.Home)
	if err != nil {
		e.T.Errorf("chain %s: restore: %v", r.ch.ID, err)
		return
	}
	defer root.Close()
	if r.ch.ModelPlugin {
		if err := root.RemoveAll(filepath.Join(r.vars["plugins"], attack.ModelPluginDir)); err != nil {
			e.T.Errorf("chain %s: remove its model-provider plugin: %v", r.ch.ID, err)
		}
	}
	for _, rel := range r.ch.Restore {
		p := filepath.Clean(attack.Fill(rel, r.vars))
		bak := p + attack.BackupSuffix
		if _, err := root.Lstat(bak); err == nil {
			if err := root.RemoveAll(p); err != nil {
				e.T.Errorf("chain %s: restore %s: %v", r.ch.ID, p, err)
			}
			if err := root.Rename(bak, p); err != nil {
				e.T.Errorf("chain %s: restore %s: %v", r.ch.ID, p, err)
			}
		} else if st, err := root.Lstat(p); err == nil && st.Mode()&os.ModeSymlink != 0 {
			_ = root.Remove(p)
		}
	}
	e.putBack(r, r.kept, nil)
}

// removeVictimPlugin removes the plugin r put in its victim's home.
func (e *Env) removeVictimPlugin(r *chainRun) {
	e.T.Helper()
	root, err := os.OpenRoot(r.v.Home)
	if err == nil {
		err = root.RemoveAll(filepath.Join(r.vars["plugins"], attack.VictimPlugin))
		root.Close()
	}
	if err != nil {
		e.T.Errorf("chain %s: remove the victim's plugin: %v", r.ch.ID, err)
	}
}
