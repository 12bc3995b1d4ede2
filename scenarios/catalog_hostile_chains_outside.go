// The outside-write watch of hostile-chains: the places outside every
// home that a chain could reach, listed before and after each phase.

package scenarios

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// plantWorkdirs gives every tenant's workdir something of its own to
// find (its env marker, in canary.txt), and a link to it under the
// sandbox whose path names no canary: a chain names the victim's workdir by
// that link, so the harness hands the attacker no canary of the victim.
func (e *Env) plantWorkdirs() {
	e.T.Helper()
	dir := filepath.Join(e.Box.Root, "chain-aliases")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		e.T.Fatalf("%v", err)
	}
	aliases := map[string]string{}
	stateOf(e, chainsKey).aliases = aliases
	for _, t := range e.Box.Set.Tenants {
		if err := os.WriteFile(filepath.Join(t.Workdir, "canary.txt"), []byte(t.Value(tenants.EnvMarker)+"\n"), 0o644); err != nil {
			e.T.Fatalf("plant the workdir of %s: %v", t.Name, err)
		}
		alias := filepath.Join(dir, t.Name)
		if err := os.Symlink(t.Workdir, alias); err != nil {
			e.T.Fatalf("link the workdir of %s: %v", t.Name, err)
		}
		aliases[t.Name] = alias
	}
}

// outsidePlaces are the folders outside every home the chains could
// reach: system folders, the workdirs' parent (strict), each tenant's
// workdir (its own), and the run's sandbox (judged by the other checks).
func (e *Env) outsidePlaces() []invariants.Place {
	places := []invariants.Place{{Root: e.Box.Root, NameOnly: true}}
	for _, d := range []string{"/usr/local/bin", "/usr/local", "/opt", "/dev/shm", "/etc"} {
		places = append(places, invariants.Place{Root: d})
	}
	// Temp folders hold the logs of the harness and of the test runner,
	// which quote canaries: only names count there.
	// /tmp and TMPDIR both: a tenant's cwd names the machine's /tmp, the
	// harness's own TMPDIR may be elsewhere (a CI runner's).
	for _, d := range slices.Compact(slices.Sorted(slices.Values([]string{"/var/tmp", "/tmp", filepath.Clean(os.TempDir())}))) {
		places = append(places, invariants.Place{Root: d, NameOnly: true})
	}
	var roots []string
	for _, t := range e.Box.Set.Tenants {
		for _, wd := range t.Workdirs() {
			places = append(places, invariants.Place{Root: wd, Owner: t.Name})
			roots = append(roots, filepath.Dir(wd))
		}
	}
	roots = append(roots, e.workRoot())
	for _, r := range slices.Compact(slices.Sorted(slices.Values(roots))) {
		places = append(places, invariants.Place{Root: r, Strict: true})
	}
	return places
}

// workRoot is the deepest folder holding every tenant's workdir (their
// shared parent, or the root of per-profile workdir folders).
func (e *Env) workRoot() string {
	root := ""
	for _, t := range e.Box.Set.Tenants {
		d := filepath.Dir(t.Workdir)
		switch {
		case root == "":
			root = d
		default:
			for !within(d, root) && root != filepath.Dir(root) {
				root = filepath.Dir(root)
			}
		}
	}
	return root
}

// watchOutside lists the outside places, runs do, lists them again and
// reports what a tenant created or changed there; entries of the machine's
// folders named after this run's write canaries (the chains' own files)
// are then removed. The listing after one phase is the next phase's
// listing before, when the places are the same: a chain's effect that
// lands between two phases (a late job, a restore's side effect) is seen
// in the next one, and a listing of the machine's folders is made once
// a phase, not twice.
func (e *Env) watchOutside(do func()) {
	e.T.Helper()
	st := stateOf(e, chainsKey)
	places := e.outsidePlaces()
	before := st.listing
	if before == nil || !slices.Equal(places, st.listed) {
		before = invariants.ListPlaces(e.Ctx, places)
	}
	defer func() {
		after := invariants.ListPlaces(e.Ctx, places)
		st.listing, st.listed = after, places
		for _, f := range invariants.OutsideWrites(e.Ctx, e.Box.Set.Tenants, places, before, after) {
			st.outside[f.Where.Path] = after[f.Where.Path].ModTime
			e.Find(f)
			if (f.Kind == HostileWrite || st.rowKinds[f.Kind]) && strings.Contains(filepath.Base(f.Where.Path), "chain-") && !within(f.Where.Path, e.Box.Root) {
				_ = os.RemoveAll(f.Where.Path)
			}
		}
	}()
	do()
}

// outsideControl is the outside-write check's positive control: an
// attacker leaves its canary in its own workdir, and the check, watching
// that workdir as a place no tenant owns, must see it.
func (e *Env) outsideControl() {
	e.T.Helper()
	a := e.attackers()[0]
	places := []invariants.Place{{Root: a.Workdir}}
	before := invariants.ListPlaces(e.Ctx, places)
	w := e.hostileCanaries(a)
	row := attack.Row{ID: "chain-control", Class: attack.Write, Tries: "leave its canary in its own workdir",
		Refusal: "nothing to refuse: its own workdir", Call: func(c attack.Canaries) attack.Call {
			return attack.Call{Tool: "terminal", Args: map[string]any{"command": `printf '%s\n' '` + c.Write + `' > "$PWD/chain-control.txt"; echo '` + attack.RowDone + `'`}}
		}}
	e.Attack(e.Conns[a.Name], a, e.Sessions[a.Name].SessionID, row, w)
	after := invariants.ListPlaces(e.Ctx, places)
	for _, f := range invariants.OutsideWrites(e.Ctx, e.Box.Set.Tenants, places, before, after) {
		if f.Owner == a.Name {
			return
		}
	}
	e.Find(invariants.Finding{Invariant: invariants.Control, Tenant: a.Name, Where: invariants.Where{Path: a.Workdir},
		Detail: "the outside-write check did not see the tenant's own canary left in its own workdir: it would see nothing"})
}

func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
