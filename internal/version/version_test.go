package version

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	hashA = "1111111111111111111111111111111111111111"
	hashB = "2222222222222222222222222222222222222222"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

// checkout makes a fake checkout of this module with HEAD on main.
func checkout(t *testing.T) string {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "go.mod"), "module "+ModulePath+"\n\ngo 1.26.0\n")
	write(t, filepath.Join(dir, ".git", "HEAD"), "ref: refs/heads/main\n")
	return dir
}

func TestBuildInfoWins(t *testing.T) {
	t.Parallel()
	dir := checkout(t)
	write(t, filepath.Join(dir, ".git", "refs", "heads", "main"), hashB+"\n")
	bi := &debug.BuildInfo{Main: debug.Module{Path: ModulePath, Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: hashA}, {Key: "vcs.modified", Value: "true"}}}
	in := resolve(bi, dir)
	require.Equal(t, Info{Version: "v" + Semver, Commit: hashA, Modified: true, CommitSource: FromBuildInfo}, in)
	require.Equal(t, "v"+Semver+" (commit 111111111111, modified, from build info)", in.String())

	bi.Main.Version = "v9.8.7"
	require.Equal(t, "v9.8.7", resolve(bi, dir).Version, "a module version go install recorded wins over Semver")
}

func TestGitFallbackUnderGoRun(t *testing.T) {
	t.Parallel()
	runBI := &debug.BuildInfo{Main: debug.Module{Path: ModulePath, Version: "(devel)"}} // go run: no vcs stamp

	// A loose ref, found from a subdirectory.
	dir := checkout(t)
	write(t, filepath.Join(dir, ".git", "refs", "heads", "main"), hashB+"\n")
	sub := filepath.Join(dir, "cmd", "canary-run")
	require.NoError(t, os.MkdirAll(sub, 0o755))
	in := resolve(runBI, sub)
	require.Equal(t, hashB, in.Commit)
	require.Equal(t, FromGitDir, in.CommitSource)
	require.Contains(t, in.String(), "from .git at run time; local changes not checked", "honest about what it could not see")

	// A packed ref.
	dir = checkout(t)
	write(t, filepath.Join(dir, ".git", "packed-refs"), "# pack-refs with: peeled\n"+hashA+" refs/heads/main\n")
	require.Equal(t, hashA, resolve(runBI, dir).Commit)

	// A detached HEAD.
	dir = checkout(t)
	write(t, filepath.Join(dir, ".git", "HEAD"), hashA+"\n")
	require.Equal(t, hashA, resolve(runBI, dir).Commit)

	// A worktree: .git is a file; the branch lives in the common directory.
	common := t.TempDir()
	write(t, filepath.Join(common, "refs", "heads", "green"), hashB+"\n")
	wtGit := filepath.Join(common, "worktrees", "green")
	write(t, filepath.Join(wtGit, "HEAD"), "ref: refs/heads/green\n")
	write(t, filepath.Join(wtGit, "commondir"), "../..\n")
	wt := t.TempDir()
	write(t, filepath.Join(wt, "go.mod"), "module "+ModulePath+"\n")
	write(t, filepath.Join(wt, ".git"), "gitdir: "+wtGit+"\n")
	require.Equal(t, hashB, resolve(runBI, wt).Commit)
}

func TestNoCommitSaysSo(t *testing.T) {
	t.Parallel()
	// Another module's checkout is not ours to quote.
	other := t.TempDir()
	write(t, filepath.Join(other, "go.mod"), "module example.com/other\n")
	write(t, filepath.Join(other, ".git", "HEAD"), hashA+"\n")
	in := resolve(nil, other)
	require.Empty(t, in.Commit)
	require.Equal(t, "v"+Semver, in.Version)
	require.True(t, strings.HasPrefix(in.String(), "v"+Semver+" (commit unknown: "), in.String())

	// A corrupt HEAD gives no commit rather than a wrong one.
	dir := checkout(t)
	write(t, filepath.Join(dir, ".git", "refs", "heads", "main"), "not-a-hash\n")
	require.Empty(t, resolve(nil, dir).Commit)
}

func TestThisCheckoutHasACommit(t *testing.T) {
	t.Parallel()
	in := Get()
	require.True(t, strings.HasPrefix(in.Version, "v"), in.Version)
	if _, err := os.Stat(filepath.Join("..", "..", ".git")); err == nil {
		// go test runs in the package directory of this checkout.
		require.NotEmpty(t, in.Commit, "the .git fallback finds this checkout's commit: %s", in)
	}
}

// TestSourceFallbackOutsideTheCheckout: run from a folder outside any
// checkout (a target's own folder) under go run, the commit still comes
// from the checkout the source was compiled in; from neither, it is
// unknown (the control).
func TestSourceFallbackOutsideTheCheckout(t *testing.T) {
	t.Parallel()
	runBI := &debug.BuildInfo{Main: debug.Module{Path: ModulePath, Version: "(devel)"}}
	src := checkout(t)
	write(t, filepath.Join(src, ".git", "refs", "heads", "main"), hashB+"\n")
	sub := filepath.Join(src, "internal", "version")
	require.NoError(t, os.MkdirAll(sub, 0o755))
	elsewhere := t.TempDir()
	require.Empty(t, resolve(runBI, elsewhere).Commit, "the control: the working directory alone knows no commit")
	in := resolveFrom(runBI, elsewhere, sub)
	require.Equal(t, hashB, in.Commit)
	require.Equal(t, FromGitDir, in.CommitSource)
	require.Empty(t, resolveFrom(runBI, elsewhere, t.TempDir()).Commit)
}
