package invariants

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/tenantcanary/tenantcanary/invariants/scan"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// SharedPlaces lists what to scan as shared places under a sandbox root:
// every file and folder that is not inside a tenant's home or state folder,
// a tenant's workdir, or one of skip (the harness's own logs, say). A folder holding
// none of those is one entry, scanned whole.
func SharedPlaces(s *tenants.Set, skip ...string) []string {
	excluded := append([]string(nil), skip...)
	for _, t := range s.Tenants {
		excluded = append(excluded, t.Places()...)
		excluded = append(excluded, t.Workdirs()...)
	}
	var out []string
	var walk func(dir string)
	walk = func(dir string) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			inside, holds := false, false
			for _, x := range excluded {
				inside = inside || within(p, x)
				holds = holds || within(x, p)
			}
			switch {
			case inside:
			case holds && e.IsDir():
				walk(p)
			case e.IsDir() || e.Type().IsRegular():
				out = append(out, p)
			}
		}
	}
	walk(s.Root)
	return out
}

// SharedPlaceLeaks scans paths (shared places: see SharedPlaces; files or
// folders) for every tenant's secrets: nobody owns a shared place, so any
// tenant's secret there is a finding ("a shared place holds alpha's
// provider key"). A file that could not be read is a Harness finding.
func (c *Checker) SharedPlaceLeaks(ctx context.Context, paths []string) []Finding {
	out, skipped := c.sharedPlaceLeaks(ctx, paths)
	for _, sk := range skipped {
		out = append(out, Finding{Invariant: Harness, Where: Where{Path: sk.Path}, Detail: "not scanned: " + sk.Reason})
	}
	return Dedup(out)
}

// SystemTempLeaks is SharedPlaceLeaks for entries of the machine's own
// temp folder that the run attributes to the target (made since the run
// began, by its user, not the harness's). Other programs of that user
// write there too, so an entry the scanner cannot read (too big, a
// decompression bomb, gone half-way) cannot be pinned on the target: it
// is listed in notScanned, never a Harness finding. A tenant's secret
// found there is a finding all the same: canaries are this run's own, so
// no other program can hold one.
//
// An entry that went while it was scanned (another program's build folder,
// cleaned up) is not listed at all: nothing of it is at rest to hold a
// secret, and listing it would make a busy machine's run partial.
func (c *Checker) SystemTempLeaks(ctx context.Context, paths []string) (findings []Finding, notScanned []string) {
	out, skipped := c.sharedPlaceLeaks(ctx, paths)
	for _, sk := range skipped {
		if gone(sk) {
			continue
		}
		notScanned = append(notScanned, sk.Path+": "+sk.Reason)
	}
	return Dedup(out), notScanned
}

// gone reports whether a skip is of an entry that went while it was
// scanned: nothing of it is at rest.
func gone(sk scan.Skip) bool { return errors.Is(sk.Err, fs.ErrNotExist) }

func (c *Checker) sharedPlaceLeaks(ctx context.Context, paths []string) ([]Finding, []scan.Skip) {
	var out []Finding
	var skipped []scan.Skip
	for _, p := range paths {
		var r scan.Report
		st, err := os.Lstat(p)
		switch {
		case err != nil:
			continue // gone since listed: nothing at rest to scan
		case st.IsDir():
			r = c.m.m.Tree(ctx, p)
		case st.Mode().IsRegular():
			r = c.m.m.File(ctx, p)
		default:
			continue
		}
		for _, h := range r.Hits {
			if !tenants.Kind(h.Pattern.Kind).Secret() {
				continue
			}
			out = append(out, hitFinding(SharedPlace, "", h.Match, fileWhere(h)))
		}
		skipped = append(skipped, r.Skipped...)
	}
	return out, skipped
}
