package invariants

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tenantcanary/tenantcanary/tenants"
)

// Hashes maps the path of every regular file under some roots to the
// SHA-256 of its content.
type Hashes map[string]string

// HashTree hashes every regular file under roots (symlinks not followed).
// Overlapping roots are fine. A file that vanishes between the listing and
// the read (a live target's temp file) is simply not there; any other file
// that cannot be read is an error: a write-scope check over a partial
// snapshot would prove nothing.
func HashTree(ctx context.Context, roots ...string) (Hashes, error) {
	out := Hashes{}
	for _, root := range roots {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) && path != root {
					return nil
				}
				return fmt.Errorf("walk %s: %w", path, err)
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if !d.Type().IsRegular() {
				return nil
			}
			f, err := os.Open(path)
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("hash %s: %w", path, err)
			}
			defer f.Close()
			h := sha256.New()
			if _, err := io.Copy(h, f); err != nil {
				return fmt.Errorf("hash %s: %w", path, err)
			}
			out[path] = hex.EncodeToString(h.Sum(nil))
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("snapshot files under %s: %w", root, err)
		}
	}
	return out, nil
}

// WriteScopeChanges compares the snapshots taken before and after a write
// addressed to one tenant and reports every changed, added or removed file
// that the write was not expected to touch: anything outside the addressed
// tenant's own places (its home, its state folder), and anything in them
// that matches none of expected (glob patterns relative to the place, as
// filepath.Match takes them; a pattern ending in "/" matches everything
// under that folder). An absolute pattern matches wherever it points, for
// a file the target changes on every write whoever it is addressed to (a
// shared log of the server, say).
func WriteScopeChanges(s *tenants.Set, addressed string, before, after Hashes, expected ...string) []Finding {
	t := s.Get(addressed)
	if t == nil {
		return harnessFinding(addressed, fmt.Errorf("write scope: %q is not a tenant of this run", addressed))
	}
	paths := make([]string, 0, len(before)+len(after))
	for p := range before {
		paths = append(paths, p)
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	var out []Finding
	for _, p := range paths {
		b, hadB := before[p]
		a, hasA := after[p]
		var change string
		switch {
		case !hadB:
			change = "added"
		case !hasA:
			change = "removed"
		case a != b:
			change = "changed"
		default:
			continue
		}
		place, _ := placeOf(s, p)
		if (place == addressed && expectedInPlaces(t, p, expected)) || expectedAnywhere(p, expected) {
			continue
		}
		out = append(out, Finding{Invariant: WriteScope, Tenant: place, Where: Where{Path: p},
			Detail: fmt.Sprintf("%s by a write addressed to %s", change, addressed)})
	}
	return out
}

// expectedInPlaces reports whether a relative pattern matches path below
// one of t's own places (its home, its state folder).
func expectedInPlaces(t *tenants.Tenant, path string, patterns []string) bool {
	for _, own := range t.Places() {
		if within(path, own) && expectedIn(own, path, patterns) {
			return true
		}
	}
	return false
}

// expectedAnywhere reports whether an absolute pattern matches path.
func expectedAnywhere(path string, patterns []string) bool {
	return matchAny(path, patterns, true)
}

// expectedIn reports whether a pattern relative to home matches path.
func expectedIn(home, path string, patterns []string) bool {
	rel, err := filepath.Rel(home, path)
	if err != nil {
		return false
	}
	return matchAny(filepath.ToSlash(rel), patterns, false)
}

// matchAny reports whether one of the patterns that are absolute (or, with
// abs false, relative) matches name: a pattern ending in "/" matches
// everything under that folder, any other one as filepath.Match does.
func matchAny(name string, patterns []string, abs bool) bool {
	for _, p := range patterns {
		if filepath.IsAbs(p) != abs {
			continue
		}
		if strings.HasSuffix(p, "/") && strings.HasPrefix(name, p) {
			return true
		}
		if ok, _ := filepath.Match(p, name); ok {
			return true
		}
	}
	return false
}
