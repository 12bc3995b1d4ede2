package invariants

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/invariants/scan"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Entry is what a listing keeps of one file or folder: enough to tell that
// it changed, without reading it.
type Entry struct {
	Size    int64
	ModTime time.Time
	Mode    fs.FileMode
}

// Listing maps paths to their entries.
type Listing map[string]Entry

// Place is a folder outside every home that the outside-write check
// watches. Owner is the tenant whose place it is (its workdir), "" for a
// shared or system folder. Strict counts every new or changed entry (a
// folder of the run's own, where nothing may appear); otherwise only one
// carrying a canary of the run counts (a system folder other programs of
// the machine write too).
type Place struct {
	Root   string
	Owner  string
	Strict bool
	// NameOnly judges an entry by its name only: in a folder where the
	// harness itself (or the test runner) writes logs that quote canaries,
	// such as the system temp folder.
	NameOnly bool
}

// OutsideLimit bounds a listing: at most this many entries, this deep
// below each root, and content read up to OutsideReadCap per file.
const (
	OutsideLimit   = 20000
	OutsideDepth   = 3
	OutsideReadCap = 1 << 20
)

// ListPlaces lists every entry under the places' roots (links not
// followed, at most OutsideDepth levels below a root and OutsideLimit
// entries in all). A root that does not exist or cannot be read is
// skipped: the check sees what the harness can see. An entry whose place
// (the deepest holding it) judges names only has its type and no more:
// a change of its content or time is not looked at there.
func ListPlaces(ctx context.Context, places []Place) Listing {
	out := Listing{}
	judge := newPlaceIndex(places)
	for _, p := range places {
		root := filepath.Clean(p.Root)
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || ctx.Err() != nil {
				return nil
			}
			if len(out) >= OutsideLimit {
				return filepath.SkipAll
			}
			// path is root joined with the entry's path below it.
			rel := strings.TrimPrefix(path[len(root):], string(filepath.Separator))
			if d.IsDir() && strings.Count(rel, string(filepath.Separator)) >= OutsideDepth {
				return filepath.SkipDir
			}
			if _, seen := out[path]; seen {
				return nil // listed from a place around this one
			}
			if p, _ := judge.of(path); p.NameOnly {
				// Only its name is judged: no stat (the system temp
				// folder holds most of a listing's entries).
				out[path] = Entry{Mode: d.Type()}
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return nil
			}
			out[path] = Entry{Size: info.Size(), ModTime: info.ModTime(), Mode: info.Mode()}
			return nil
		})
	}
	return out
}

// OutsideWrites compares listings of places taken before and after the
// tenants acted, and reports, as write-scope findings, every entry added
// or changed that no tenant may write: in a tenant's workdir, one carrying
// another tenant's canary (in its name or content); in a strict place,
// any; in any other place, one carrying a canary of any tenant of ts.
// Within overlapping places the deepest one judges.
func OutsideWrites(ctx context.Context, ts []*tenants.Tenant, places []Place, before, after Listing) []Finding {
	paths := make([]string, 0, len(after))
	for p, a := range after {
		if b, ok := before[p]; !ok || b != a {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	judge := newPlaceIndex(places)
	var out []Finding
	for _, path := range paths {
		if ctx.Err() != nil {
			break
		}
		place, ok := judge.of(path)
		if !ok || filepath.Clean(place.Root) == path {
			continue // the watched folder itself changes with every entry
		}
		change := "added"
		if _, had := before[path]; had {
			change = "changed"
		}
		owners := carried(ts, path, after[path], place.NameOnly)
		switch {
		case place.Owner != "":
			for _, c := range owners {
				if c.Owner != place.Owner {
					out = append(out, outsideFinding(place, path, change, c))
				}
			}
		case len(owners) > 0:
			for _, c := range owners {
				out = append(out, outsideFinding(place, path, change, c))
			}
		case place.Strict:
			out = append(out, Finding{Invariant: WriteScope, Where: Where{Path: path},
				Detail: fmt.Sprintf("%s in %s, a place no tenant may write", change, place.Root)})
		}
	}
	return Dedup(out)
}

func outsideFinding(p Place, path, change string, c tenants.Canary) Finding {
	where := "outside every home"
	if p.Owner != "" {
		where = "in " + p.Owner + "'s workdir"
	}
	return Finding{Invariant: WriteScope, Tenant: p.Owner, Owner: c.Owner, Kind: c.Kind, Where: Where{Path: path},
		Detail: fmt.Sprintf("%s %s (under %s)", change, where, p.Root)}
}

// placeIndex finds the place that judges a path: the deepest holding it.
// A listing asks it of every entry, so the roots are cleaned once and a
// path is within one by its prefix.
type placeIndex struct {
	places []Place
	roots  []string // places[i].Root, clean
}

func newPlaceIndex(places []Place) placeIndex {
	roots := make([]string, len(places))
	for i, p := range places {
		roots[i] = filepath.Clean(p.Root)
	}
	return placeIndex{places: places, roots: roots}
}

// of is the deepest place holding the clean path (the first of equally
// deep ones).
func (x placeIndex) of(path string) (Place, bool) {
	best := -1
	for i, r := range x.roots {
		in := path == r || strings.HasPrefix(path, r) &&
			(strings.HasSuffix(r, string(filepath.Separator)) || path[len(r)] == filepath.Separator)
		if in && (best < 0 || len(r) > len(x.roots[best])) {
			best = i
		}
	}
	if best < 0 {
		return Place{}, false
	}
	return x.places[best], true
}

// carried lists the canaries of ts in path's name, or in its content (a
// regular file, up to OutsideReadCap, raw; a link's target), unless
// nameOnly.
func carried(ts []*tenants.Tenant, path string, e Entry, nameOnly bool) []tenants.Canary {
	var data []byte
	if e.Mode.IsRegular() && !nameOnly {
		if f, err := os.Open(path); err == nil {
			data, _ = io.ReadAll(io.LimitReader(f, OutsideReadCap))
			f.Close()
		}
	}
	if e.Mode&fs.ModeSymlink != 0 && !nameOnly {
		if target, err := os.Readlink(path); err == nil {
			data = []byte(target)
		}
	}
	name := []byte(filepath.Base(path))
	var out []tenants.Canary
	for _, t := range ts {
		for _, c := range t.Canaries() {
			v := []byte(c.Value)
			if bytes.Contains(name, v) || bytes.Contains(data, v) {
				out = append(out, c)
			}
		}
	}
	return out
}

// Inherits scans home, the home of a profile made again under the name of
// a deleted one, for the deleted profile's canaries (every encoding the
// file scan knows): each hit is a file finding, though the names match.
// The same call over the deleted profile's home before the delete is its
// positive control.
func Inherits(ctx context.Context, place, home string, deleted []tenants.Canary) []Finding {
	m, err := scan.Compile(Patterns(deleted))
	if err != nil {
		return harnessFinding(place, fmt.Errorf("inherits: %w", err))
	}
	return homeFindings(ctx, m, place, home, "the profile made again under the same name holds the deleted one's")
}
