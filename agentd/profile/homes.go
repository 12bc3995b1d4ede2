package profile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/homefs"
)

// LaunchName is the name the launch profile answers to.
const LaunchName = "default"

// DefaultManagedDir is the managed (operator) scope when AGENTD_MANAGED_DIR
// is unset.
const DefaultManagedDir = "/etc/agentd"

var (
	// ErrUnknownProfile is returned for a profile name with no home on disk.
	ErrUnknownProfile = errors.New("unknown profile")
	// ErrProfileExists is returned when creating a profile that exists.
	ErrProfileExists = errors.New("profile already exists")
	// ErrBadName is returned for a profile name outside [a-z0-9][a-z0-9_-]*.
	ErrBadName = errors.New("bad profile name")
)

// The length is checked apart: a counted repetition ({0,63}) compiles into
// as many copies, at the start of every process of the binary.
var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// Homes locates the launch home, its profiles and the managed scope.
type Homes struct {
	Launch  string     // the launch profile's home ($AGENTD_HOME)
	Managed string     // directory holding the managed config.yaml
	Faults  faults.Set // seeded faults (test-only), handed to every Profile
}

// Resolve computes the homes from an environment lookup (os.Getenv in
// production, a map in tests): AGENTD_HOME, else $HOME/.agentd;
// AGENTD_MANAGED_DIR, else /etc/agentd.
func Resolve(getenv func(string) string) (Homes, error) {
	h := Homes{Launch: getenv("AGENTD_HOME"), Managed: getenv("AGENTD_MANAGED_DIR")}
	if h.Launch == "" {
		home := getenv("HOME")
		if home == "" {
			return Homes{}, errors.New("resolve launch home: neither AGENTD_HOME nor HOME is set")
		}
		h.Launch = filepath.Join(home, ".agentd")
	}
	if h.Managed == "" {
		h.Managed = DefaultManagedDir
	}
	abs, err := filepath.Abs(h.Launch)
	if err != nil {
		return Homes{}, fmt.Errorf("resolve launch home %q: %w", h.Launch, err)
	}
	h.Launch = abs
	return h, nil
}

// Root is the directory holding the named profiles.
func (h Homes) Root() string { return filepath.Join(h.Launch, "profiles") }

// ValidName reports whether name may name a profile.
func ValidName(name string) error {
	if len(name) > 64 || !nameRE.MatchString(name) {
		return fmt.Errorf("%w %q: want 1-64 of [a-z0-9_-], starting with a letter or digit", ErrBadName, name)
	}
	return nil
}

// Path is the home of the named profile, whether or not it exists. The
// launch profile is "" or LaunchName.
func (h Homes) Path(name string) (string, error) {
	if name == "" || name == LaunchName {
		return h.Launch, nil
	}
	if err := ValidName(name); err != nil {
		return "", err
	}
	return filepath.Join(h.Root(), name), nil
}

// Get returns the named profile; its home must exist (the launch home is
// created on demand).
func (h Homes) Get(name string) (Profile, error) {
	dir, err := h.Path(name)
	if err != nil {
		return Profile{}, fmt.Errorf("%w %q: %v", ErrUnknownProfile, name, err)
	}
	if name == "" {
		name = LaunchName
	}
	p := Profile{Name: name, Home: dir, Managed: h.Managed, Faults: h.Faults}
	if name == LaunchName {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return Profile{}, fmt.Errorf("create launch home %s: %w", dir, err)
		}
		return p, nil
	}
	// Lstat: a home that is a link is no home (the profiles folder is the
	// operator's, so this is belt and braces).
	st, err := os.Lstat(dir)
	if err != nil || !st.IsDir() {
		return Profile{}, fmt.Errorf("%w %q (no home at %s)", ErrUnknownProfile, name, dir)
	}
	return p, nil
}

// List returns the launch profile followed by the named profiles, sorted.
func (h Homes) List() ([]Profile, error) {
	out := []Profile{{Name: LaunchName, Home: h.Launch, Managed: h.Managed, Faults: h.Faults}}
	entries, err := os.ReadDir(h.Root())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("list profiles in %s: %w", h.Root(), err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.IsDir() && ValidName(e.Name()) == nil && e.Name() != LaunchName {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, n := range names {
		out = append(out, Profile{Name: n, Home: filepath.Join(h.Root(), n), Managed: h.Managed, Faults: h.Faults})
	}
	return out, nil
}

// Create makes a new named profile home with an empty skeleton. It copies
// nothing from any other profile, so no secret can travel, and it never
// reuses a folder: the home is made with an exclusive mkdir, so anything
// already at its path (a home, a file, a link) is ErrProfileExists.
// A home a deletion renamed aside is never looked at.
func (h Homes) Create(name string) (Profile, error) {
	if name == LaunchName {
		return Profile{}, fmt.Errorf("create profile %q: the launch profile always exists: %w", name, ErrProfileExists)
	}
	if err := ValidName(name); err != nil {
		return Profile{}, fmt.Errorf("create profile: %w", err)
	}
	dir, err := h.Path(name)
	if err != nil {
		return Profile{}, fmt.Errorf("create profile: %w", err)
	}
	if err := os.MkdirAll(h.Root(), 0o700); err != nil {
		return Profile{}, fmt.Errorf("create profiles root %s: %w", h.Root(), err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return Profile{}, fmt.Errorf("create profile %q: %w (%s)", name, ErrProfileExists, dir)
		}
		return Profile{}, fmt.Errorf("create profile %q: %w", name, err)
	}
	p := Profile{Name: name, Home: dir, Managed: h.Managed, Faults: h.Faults}
	if err := p.Skeleton(); err != nil {
		_ = os.RemoveAll(dir) // a half-made home is no profile
		return Profile{}, err
	}
	return p, nil
}

// Delete removes a named profile's home: renamed aside first (SetAside),
// so the name is free and nothing of the home is left at its path, then
// removed. The launch profile cannot be deleted. A server deletes through
// its scope pool (scope.Pool.Delete), which also drains the profile's work.
func (h Homes) Delete(name string) error {
	aside, err := h.SetAside(name)
	if err != nil {
		return err
	}
	return h.RemoveAside(aside)
}

// deletedPrefix starts the name of a home renamed aside by a deletion;
// ValidName refuses it, so List and Get never see such a folder.
const deletedPrefix = ".deleted-"

// SetAside renames a named profile's home to a fresh hidden folder beside
// it (<root>/.deleted-<name>-<random>) and returns that folder's path.
func (h Homes) SetAside(name string) (string, error) {
	if name == "" || name == LaunchName {
		return "", fmt.Errorf("delete profile %q: the launch profile cannot be deleted: %w", name, ErrBadName)
	}
	dir, err := h.Path(name)
	if err != nil {
		return "", fmt.Errorf("delete profile: %w", err)
	}
	if st, err := os.Lstat(dir); err != nil || !st.IsDir() {
		return "", fmt.Errorf("delete profile: %w %q (no home at %s)", ErrUnknownProfile, name, dir)
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("delete profile %q: %w", name, err)
	}
	aside := filepath.Join(h.Root(), deletedPrefix+name+"-"+hex.EncodeToString(b[:]))
	if err := os.Rename(dir, aside); err != nil {
		return "", fmt.Errorf("delete profile %q: rename its home aside: %w", name, err)
	}
	return aside, nil
}

// RemoveAside removes a home SetAside renamed aside.
func (h Homes) RemoveAside(aside string) error {
	if filepath.Dir(aside) != h.Root() || !strings.HasPrefix(filepath.Base(aside), deletedPrefix) {
		return fmt.Errorf("remove %s: not a home set aside in %s", aside, h.Root())
	}
	if err := os.RemoveAll(aside); err != nil {
		return fmt.Errorf("remove deleted home %s: %w", aside, err)
	}
	return nil
}

// Profile is one tenant's home.
type Profile struct {
	Name    string     // LaunchName for the launch profile
	Home    string     // absolute path of the home
	Managed string     // managed scope directory
	Faults  faults.Set // seeded faults (test-only)
	// OwnOperatorKeys lets the profile's own config.yaml set the keys of
	// OperatorOnly. It is false (they are ignored) unless whoever serves
	// the profile trusts its home as the operator's own: the launch
	// profile of a single-tenant agentd tui.
	OwnOperatorKeys bool
}

// File is the path of a file inside the profile's home, for messages and
// for programs that take a path. agentd itself opens home files through
// FS, never by this path.
func (p Profile) File(parts ...string) string {
	return filepath.Join(append([]string{p.Home}, parts...)...)
}

// FS is the one way into the profile's home: every file agentd opens,
// creates, renames or removes there goes through it, and it follows no
// symlink (see package homefs). The seeded faults home-follows-links and
// home-special-files turn that off.
func (p Profile) FS() homefs.Home {
	return homefs.Home{Dir: p.Home, FollowLinks: p.Faults.Has(faults.HomeFollowsLinks), SpecialFiles: p.Faults.Has(faults.HomeSpecialFiles)}
}

// Skeleton creates the home's folders and empty files that do not exist yet.
// A file or folder that is a symlink is left alone here (O_EXCL creates
// nothing over it) and refused where it is used.
func (p Profile) Skeleton() error {
	home := p.FS()
	for _, d := range []string{"memories", "logs", "cron/output", "plugins"} {
		if err := home.MkdirAll(d, 0o700); err != nil {
			if errors.Is(err, homefs.ErrLink) {
				continue // refused where it is used, with the same error
			}
			return fmt.Errorf("create %s in profile %q: %w", d, p.Name, err)
		}
	}
	for _, f := range []string{"config.yaml", ".env", "SOUL.md", "memories/MEMORY.md"} {
		fd, err := home.OpenFile(f, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if errors.Is(err, os.ErrExist) || errors.Is(err, homefs.ErrLink) {
			continue
		}
		if err != nil {
			return fmt.Errorf("create %s in profile %q: %w", f, p.Name, err)
		}
		if err := fd.Close(); err != nil {
			return fmt.Errorf("create %s in profile %q: %w", f, p.Name, err)
		}
	}
	return nil
}
