package tenants

import (
	"fmt"
	"path/filepath"
	"strings"
)

// RootPlaceholder stands, in Layout.StateRoot, for the sandbox root.
const RootPlaceholder = "{root}"

// StateDirVars are the placeholders of Layout.StateDir: the tenant's
// name and its profile's name (Tenant.Profile: the launch tenant's is
// LaunchProfile).
var StateDirVars = []string{"{name}", "{profile}"}

// StateRootOf is the folder of the tenants' state folders for a sandbox at
// root (Layout.StateRoot filled), or "" when the layout keeps each
// tenant's state in its home.
func (l Layout) StateRootOf(root string) string {
	if l.StateRoot == "" {
		return ""
	}
	return filepath.Clean(strings.ReplaceAll(l.StateRoot, RootPlaceholder, root))
}

// stateDir is Layout.StateDir, "{profile}" when not given.
func (l Layout) stateDir() string {
	if l.StateDir == "" {
		return "{profile}"
	}
	return l.StateDir
}

// StateFolder is where the target keeps t's state apart from its home,
// for a sandbox at root, or "" when the layout declares no state root.
func (l Layout) StateFolder(root string, t *Tenant) string {
	sr := l.StateRootOf(root)
	if sr == "" {
		return ""
	}
	dir := strings.NewReplacer("{name}", t.Name, "{profile}", t.Profile()).Replace(l.stateDir())
	return filepath.Join(sr, filepath.FromSlash(dir))
}

// StateDBName is the state database's path relative to a tenant's state
// folder (or its home, when the layout declares no state root):
// Layout.StateDB, else the home file State. "" is a target without one.
func (l Layout) StateDBName() string {
	if l.StateDB != "" {
		return l.StateDB
	}
	return l.WithDefaults().Files.State
}

// StateDB is the path of t's state database under layout, or "" when the
// layout names none.
func (t *Tenant) StateDB(l Layout) string {
	name := l.StateDBName()
	if name == "" {
		return ""
	}
	base := t.Home
	if t.State != "" {
		base = t.State
	}
	return filepath.Join(base, filepath.FromSlash(name))
}

// Places are the folders that are t's own: its home, and its state folder
// when the target keeps one apart.
func (t *Tenant) Places() []string {
	if t.State == "" {
		return []string{t.Home}
	}
	return []string{t.Home, t.State}
}

// CheckState reports what is wrong with the layout's state places, each
// error naming its field: a state root outside the sandbox, a state
// folder that is not a relative path holding {name} or {profile}, a state
// database that is not a relative path.
func (l Layout) CheckState() []error {
	var errs []error
	if l.StateRoot != "" && !strings.HasPrefix(l.StateRoot, RootPlaceholder+"/") {
		errs = append(errs, fmt.Errorf("layout.state_root %q: want a folder inside the sandbox ({root}/...)", l.StateRoot))
	}
	if l.StateRoot != "" {
		if sr := l.StateRootOf("/sandbox"); sr == "/sandbox" || !strings.HasPrefix(sr, "/sandbox/") {
			errs = append(errs, fmt.Errorf("layout.state_root %q: want a folder inside the sandbox, not the sandbox or above it", l.StateRoot))
		}
	}
	if l.StateDir != "" {
		if l.StateRoot == "" {
			errs = append(errs, fmt.Errorf("layout.state_dir %q without layout.state_root", l.StateDir))
		}
		probe := strings.NewReplacer("{name}", "n", "{profile}", "p").Replace(l.StateDir)
		switch {
		case strings.Contains(probe, "{"):
			errs = append(errs, fmt.Errorf("layout.state_dir %q: unknown placeholder (known: %s)", l.StateDir, strings.Join(StateDirVars, " ")))
		case probe == l.StateDir:
			errs = append(errs, fmt.Errorf("layout.state_dir %q: want {name} or {profile} in it, so each tenant has its own folder", l.StateDir))
		case filepath.IsAbs(probe) || !filepath.IsLocal(probe):
			errs = append(errs, fmt.Errorf("layout.state_dir %q: want a path inside layout.state_root", l.StateDir))
		}
	}
	if l.StateDB != "" && (filepath.IsAbs(l.StateDB) || !filepath.IsLocal(l.StateDB)) {
		errs = append(errs, fmt.Errorf("layout.state_db %q: want a path relative to the tenant's state folder (or home)", l.StateDB))
	}
	return errs
}
