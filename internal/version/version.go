// Package version is the one place tenantcanary's version lives: the
// release's semantic version and the VCS commit the running build came
// from.
//
// The commit comes from the build info `go build` stamps into a binary from
// a git checkout (vcs.revision). `go run` and `go test` stamp none, and
// neither does a build with -buildvcs=false, so the fallback reads the
// commit from the checkout's .git at run time, when the working directory
// (or, failing it, the folder this package was compiled from) lies inside
// this module's checkout; Info says which source it used, and says so when
// there was none.
//
//	fmt.Println("canary-run", version.Get()) // canary-run v0.16.0 (commit 1a2b3c4d5e6f, from build info)
package version

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
)

// Semver is the release version of this source tree. A release tag is
// "v" + Semver; bump both together.
const Semver = "0.18.0"

// ModulePath is this module's path.
const ModulePath = "github.com/tenantcanary/tenantcanary"

// Sources of the commit.
const (
	FromBuildInfo = "build info"
	FromGitDir    = ".git at run time"
)

// Info is the running build's version.
type Info struct {
	// Version is the module version `go install ...@vX.Y.Z` recorded, else
	// "v" + Semver.
	Version string `json:"version"`
	// Commit is the full VCS revision, or "" when unknown.
	Commit string `json:"commit,omitempty"`
	// Modified: the build had uncommitted changes (known only from build
	// info).
	Modified bool `json:"modified,omitempty"`
	// CommitSource is FromBuildInfo or FromGitDir, or "" when unknown.
	CommitSource string `json:"commit_source,omitempty"`
}

var (
	once sync.Once
	info Info
)

// Get returns the running build's version (computed once).
func Get() Info {
	once.Do(func() {
		wd, _ := os.Getwd()
		bi, _ := debug.ReadBuildInfo()
		src := ""
		if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
			src = filepath.Dir(file)
		}
		info = resolveFrom(bi, wd, src)
	})
	return info
}

// resolveFrom is resolve from wd, then, failing a commit, from src (the
// folder this package was compiled from: under go run from outside the
// checkout, a target's own folder say, the source still lies in it,
// unless the build trimmed its paths).
func resolveFrom(bi *debug.BuildInfo, wd, src string) Info {
	in := resolve(bi, wd)
	if in.Commit == "" && src != "" {
		in = resolve(bi, src)
	}
	return in
}

// resolve computes Info from the build info and, failing a commit there,
// the checkout holding wd.
func resolve(bi *debug.BuildInfo, wd string) Info {
	in := Info{Version: "v" + Semver}
	if bi != nil {
		if v := bi.Main.Version; v != "" && v != "(devel)" && bi.Main.Path == ModulePath {
			in.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				in.Commit, in.CommitSource = s.Value, FromBuildInfo
			case "vcs.modified":
				in.Modified = s.Value == "true"
			}
		}
	}
	if in.Commit == "" && wd != "" {
		if c := gitCommit(wd); c != "" {
			in.Commit, in.CommitSource, in.Modified = c, FromGitDir, false
		}
	}
	return in
}

// Short is the commit's first 12 hex digits ("" when unknown).
func (i Info) Short() string {
	if len(i.Commit) > 12 {
		return i.Commit[:12]
	}
	return i.Commit
}

// String is "v0.16.0 (commit 1a2b3c4d5e6f, modified, from build info)", or
// "v0.16.0 (commit unknown: ...)" saying why.
func (i Info) String() string {
	if i.Commit == "" {
		return i.Version + " (commit unknown: no VCS stamp in this build and no .git above the working directory or the source)"
	}
	s := i.Version + " (commit " + i.Short()
	if i.Modified {
		s += ", modified"
	}
	if i.CommitSource == FromGitDir {
		s += ", from .git at run time; local changes not checked"
	} else if i.CommitSource != "" {
		s += ", from " + i.CommitSource
	}
	return s + ")"
}

// gitCommit finds the checkout of this module holding dir and returns the
// commit its HEAD names, or "".
func gitCommit(dir string) string {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if isThisModule(filepath.Join(d, "go.mod")) {
			gitDir := resolveGitDir(filepath.Join(d, ".git"))
			if gitDir == "" {
				return ""
			}
			return headCommit(gitDir)
		}
		if parent := filepath.Dir(d); parent == d {
			return ""
		}
	}
}

func isThisModule(goMod string) bool {
	f, err := os.Open(goMod)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "module ") {
			return strings.Trim(strings.TrimSpace(strings.TrimPrefix(line, "module ")), `"`) == ModulePath
		}
	}
	return false
}

// resolveGitDir follows a .git file ("gitdir: PATH", a worktree or a
// submodule) to the git directory.
func resolveGitDir(dotGit string) string {
	st, err := os.Stat(dotGit)
	if err != nil {
		return ""
	}
	if st.IsDir() {
		return dotGit
	}
	b, err := os.ReadFile(dotGit)
	if err != nil {
		return ""
	}
	p, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir:")
	if !ok {
		return ""
	}
	p = strings.TrimSpace(p)
	if !filepath.IsAbs(p) {
		p = filepath.Join(filepath.Dir(dotGit), p)
	}
	return p
}

// headCommit reads HEAD in gitDir: a detached hash, or a ref looked up as
// a loose ref (in the git directory or, for a worktree, its common
// directory) or in packed-refs.
func headCommit(gitDir string) string {
	b, err := os.ReadFile(filepath.Join(gitDir, "HEAD"))
	if err != nil {
		return ""
	}
	head := strings.TrimSpace(string(b))
	ref, isRef := strings.CutPrefix(head, "ref:")
	if !isRef {
		return hashOrEmpty(head)
	}
	ref = strings.TrimSpace(ref)
	dirs := []string{gitDir}
	if c, err := os.ReadFile(filepath.Join(gitDir, "commondir")); err == nil {
		common := strings.TrimSpace(string(c))
		if !filepath.IsAbs(common) {
			common = filepath.Join(gitDir, common)
		}
		dirs = append(dirs, common)
	}
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, filepath.FromSlash(ref))); err == nil {
			return hashOrEmpty(strings.TrimSpace(string(b)))
		}
	}
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "packed-refs"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if h, name, ok := strings.Cut(strings.TrimSpace(line), " "); ok && name == ref {
				return hashOrEmpty(h)
			}
		}
	}
	return ""
}

func hashOrEmpty(s string) string {
	if len(s) != 40 && len(s) != 64 {
		return ""
	}
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return ""
		}
	}
	return s
}
