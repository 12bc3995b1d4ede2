package invariants

import (
	"path/filepath"
	"slices"
	"strings"
)

// Server-wide files are files and folders in the launch profile's home
// that belong to the server, not to a tenant (its logs, locks, shared
// caches: a target file's server_files, globs relative to the launch home,
// one ending in "/" naming a folder and everything under it). A write
// there is no write-scope finding (ServerFilePatterns are absolute
// patterns for WriteScopeChanges); they are not the launch tenant's home
// either: FileLeaks leaves them to SharedPlaceLeaks, which finds any
// tenant's secret there (ServerFiles lists them).

// ServerFilePatterns are globs, relative to launchHome (or absolute: a
// server's file elsewhere in the sandbox, its state root's database), as
// the absolute patterns WriteScopeChanges takes.
func ServerFilePatterns(launchHome string, globs []string) []string {
	out := make([]string, 0, len(globs))
	for _, g := range globs {
		p := serverGlob(launchHome, g)
		if strings.HasSuffix(g, "/") {
			p += "/"
		}
		out = append(out, p)
	}
	return out
}

// ServerFiles are the existing files and folders globs (relative to
// launchHome) match, sorted.
func ServerFiles(launchHome string, globs []string) []string {
	var out []string
	for _, g := range globs {
		m, _ := filepath.Glob(serverGlob(launchHome, strings.TrimSuffix(g, "/")))
		out = append(out, m...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// serverGlob is g under launchHome, or g itself when it is absolute.
func serverGlob(launchHome, g string) string {
	if filepath.IsAbs(g) {
		return filepath.Clean(g)
	}
	return filepath.Join(launchHome, g)
}

// inServerFiles reports whether path is one of paths or under one.
func inServerFiles(path string, paths []string) bool {
	for _, p := range paths {
		if within(path, p) {
			return true
		}
	}
	return false
}
