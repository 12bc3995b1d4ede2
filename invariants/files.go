package invariants

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/tenantcanary/tenantcanary/invariants/scan"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// FileLeaks scans every regular file under every tenant's home and state
// folder (tenants.Tenant.Places; state.db
// as raw pages and rows, its WAL, logs, gzip logs, config, .env, memories,
// cron output) for another tenant's canary in any encoding. The launch
// home's profiles folder is scanned as the profiles': a file under
// profiles/<name>/ is <name>'s place. A profile that is no tenant (one made
// mid-run) may hold no tenant's secret. A file that could not be read is a
// Harness finding: the scan was incomplete there.
func FileLeaks(ctx context.Context, s *tenants.Set) []Finding {
	return withChecker(s.Tenants, s.LaunchHome, func(c *Checker) []Finding { return c.FileLeaks(ctx, s) })
}

// FileLeaks is the package's FileLeaks; s's tenants must be the ones c was
// made for. Hits in serverFiles (ServerFiles: the server's, nobody's home)
// are left to SharedPlaceLeaks.
func (c *Checker) FileLeaks(ctx context.Context, s *tenants.Set, serverFiles ...string) []Finding {
	m := c.m
	roots := TenantRoots(s)
	var out []Finding
	for _, root := range roots {
		r := m.m.Tree(ctx, root)
		c.noteRows(r.Hits)
		for _, h := range r.Hits {
			if inServerFiles(h.Path, serverFiles) {
				continue // nobody's: SharedPlaceLeaks scans them
			}
			place, tenant := placeOf(s, h.Path)
			if !m.foreign(place, h.Pattern, !tenant) {
				continue
			}
			out = append(out, hitFinding(File, place, h.Match, fileWhere(h)))
		}
		for _, sk := range r.Skipped {
			place, _ := placeOf(s, sk.Path)
			out = append(out, Finding{Invariant: Harness, Tenant: place, Where: Where{Path: sk.Path}, Detail: "not scanned: " + sk.Reason})
		}
	}
	return Dedup(out)
}

func fileWhere(h scan.Hit) Where {
	w := Where{Path: h.Path, Offset: int64p(h.Start)}
	// The container path names how the bytes were reached: "gunzipped"
	// for a gzip file, "row T row N C" for a SQLite value, else the layers
	// ("zip:a.log -> gzip", "base64@120 -> gzip", "sqlite-row -> hex@0").
	switch c := h.Container; {
	case c == "":
	case c == "gzip":
		w.Part = "gunzipped"
	case c == "sqlite-row":
		w.Part = "row " + h.Row
	case strings.HasPrefix(c, "sqlite-row -> "):
		w.Part = "row " + h.Row + " -> " + strings.TrimPrefix(c, "sqlite-row -> ")
	default:
		w.Part = c
	}
	return w
}

// placeOf names whose place path is: the tenant whose home holds it most
// closely, or a profile of the launch home that is no tenant (tenant false),
// or "" outside every home.
func placeOf(s *tenants.Set, path string) (place string, tenant bool) {
	best := ""
	for _, t := range s.Tenants {
		for _, own := range t.Places() {
			if within(path, own) && len(own) > len(best) {
				best, place = own, t.Name
			}
		}
	}
	if place != "" && best != s.LaunchHome {
		return place, true
	}
	profiles := filepath.Join(s.LaunchHome, s.Layout.WithDefaults().ProfilesDir)
	if rel, err := filepath.Rel(profiles, path); err == nil && within(path, profiles) {
		if name, _, _ := strings.Cut(rel, string(filepath.Separator)); name != "." && name != rel {
			return name, s.Get(name) != nil
		}
	}
	return place, place != ""
}

// TenantRoots are the folders to walk for the tenants' files: the launch
// home (which holds the profiles' homes), every home outside it, and every
// tenant's state folder apart from its home (tenants.Layout.StateRoot)
// that exists.
func TenantRoots(s *tenants.Set) []string {
	roots := []string{s.LaunchHome}
	add := func(dir string) {
		for _, r := range roots {
			if within(dir, r) {
				return
			}
		}
		roots = append(roots, dir)
	}
	for _, t := range s.Tenants {
		add(t.Home)
	}
	for _, t := range s.Tenants {
		if t.State == "" {
			continue
		}
		if _, err := os.Stat(t.State); err == nil {
			add(t.State)
		}
	}
	return roots
}

// within reports whether path is dir or under it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// noteRows keeps whose canaries hits show in a SQLite row of each file.
func (c *Checker) noteRows(hits []scan.Hit) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range hits {
		if h.Container != "sqlite-row" {
			continue
		}
		if c.rows == nil {
			c.rows = map[fileOwner]bool{}
		}
		c.rows[fileOwner{h.Path, h.Pattern.Owner}] = true
	}
}

// rowOf reports whether FileLeaks saw one of owner's canaries in a SQLite
// row of path.
func (c *Checker) rowOf(path, owner string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rows[fileOwner{path, owner}]
}
