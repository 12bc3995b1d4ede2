package profile

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
)

// workdirWorld is two named profiles and the launch one, with workdir
// roots <root>/work/{profile} declared in the managed scope.
type workdirWorld struct {
	h                   Homes
	launch, alpha, beta Profile
	work                string // the workdirs' parent
}

func newWorkdirWorld(t *testing.T, roots bool) workdirWorld {
	t.Helper()
	h := testHomes(t)
	w := workdirWorld{h: h, work: filepath.Join(filepath.Dir(h.Launch), "work")}
	var err error
	w.alpha, err = h.Create("alpha")
	require.NoError(t, err)
	w.beta, err = h.Create("beta")
	require.NoError(t, err)
	w.launch, err = h.Get("")
	require.NoError(t, err)
	for _, n := range []string{"alpha", "beta", "default"} {
		require.NoError(t, os.MkdirAll(filepath.Join(w.work, n, "w1"), 0o700))
	}
	if roots {
		write(t, filepath.Join(h.Managed, "config.yaml"), "terminal:\n  workdir_roots: [\""+w.work+"/{profile}\"]\n")
	}
	return w
}

// TestCheckWorkdirRefusesEveryForeignPlace: each place a hostile tenant
// pointed its cwd at is refused (ErrWorkdirRefused) with the rule that
// refused it named; its own home and roots are allowed.
func TestCheckWorkdirRefusesEveryForeignPlace(t *testing.T) {
	t.Parallel()
	w := newWorkdirWorld(t, true)
	own := filepath.Join(w.work, "alpha", "w1")
	linkToBeta := filepath.Join(own, "to-beta")
	require.NoError(t, os.Symlink(filepath.Join(w.work, "beta", "w1"), linkToBeta))
	outside := t.TempDir() // a /var/tmp or /dev/shm stand-in, holding a link to another home
	linkToHome := filepath.Join(outside, "to-beta-home")
	require.NoError(t, os.Symlink(w.beta.Home, linkToHome))

	for _, c := range []struct{ cwd, rule string }{
		{filepath.Join(w.work, "beta", "w1"), "another profile's workdir root"},
		{filepath.Join(w.work, "beta"), "another profile's workdir root"},
		{w.work, "holds every profile's workdir root"},
		{linkToBeta, "another profile's workdir root"},
		{linkToHome, `another profile's home (profile "beta")`},
		{w.beta.Home, `another profile's home (profile "beta")`},
		{w.h.Root(), "the folder of every named profile's home"},
		{w.h.Launch, "another profile's home (the launch profile's"},
		{filepath.Dir(w.h.Launch), "holds the agentd homes"},
		{"/proc", "system folder /proc"},
		{"/proc/self", "system folder /proc"},
		{"/sys", "system folder /sys"},
		{"/dev", "system folder /dev"},
		{"/dev/shm", "system folder /dev"},
		{"/usr/local/bin", "system folder /usr"},
		{"/etc", "system folder /etc"},
		{"/var/tmp", "shared system folder /var/tmp"},
		{"/", "holds"},
		{outside, "not in the profile's home"},
	} {
		_, err := w.alpha.CheckWorkdir(c.cwd)
		require.ErrorIs(t, err, sandbox.ErrWorkdirRefused, "cwd %s", c.cwd)
		require.ErrorContains(t, err, c.rule, "cwd %s", c.cwd)
		require.ErrorContains(t, err, "workdir refused: terminal.cwd "+c.cwd)
	}
	if _, err := os.Stat("/tmp"); err == nil {
		_, err := w.alpha.CheckWorkdir("/tmp")
		require.ErrorIs(t, err, sandbox.ErrWorkdirRefused, "/tmp")
	}

	for _, ok := range []string{own, filepath.Join(w.work, "alpha"), w.alpha.Home, w.alpha.File("memories")} {
		real, err := w.alpha.CheckWorkdir(ok)
		require.NoError(t, err, "cwd %s", ok)
		want, _ := filepath.EvalSymlinks(ok)
		require.Equal(t, want, real)
	}
	_, err := w.launch.CheckWorkdir(filepath.Join(w.work, "default", "w1"))
	require.NoError(t, err, "the launch profile's roots are {profile} = default")
	_, err = w.launch.CheckWorkdir(w.alpha.Home)
	require.ErrorContains(t, err, `another profile's home (profile "alpha")`)
}

// TestCheckWorkdirWithoutRootsAllowsOnlyTheHome: with no workdir_roots in
// the managed scope a profile works in its home only; roots a profile
// writes in its own config.yaml widen nothing.
func TestCheckWorkdirWithoutRootsAllowsOnlyTheHome(t *testing.T) {
	t.Parallel()
	w := newWorkdirWorld(t, false)
	write(t, w.alpha.File("config.yaml"), "terminal:\n  workdir_roots: [\""+w.work+"/{profile}\"]\n")
	_, err := w.alpha.CheckWorkdir(filepath.Join(w.work, "alpha", "w1"))
	require.ErrorIs(t, err, sandbox.ErrWorkdirRefused)
	require.ErrorContains(t, err, "the operator declared no workdir roots")
	_, err = w.alpha.CheckWorkdir(w.alpha.File("logs"))
	require.NoError(t, err)

	write(t, filepath.Join(w.h.Managed, "config.yaml"), "terminal:\n  workdir_roots: relative\n")
	_, err = w.alpha.CheckWorkdir(w.alpha.Home)
	require.ErrorIs(t, err, ErrBadConfig)
	require.ErrorContains(t, err, "terminal.workdir_roots")
}

// TestSandboxPolicyJudgesAfterResolvingLinks: a symlink in the profile's
// own workdir to another's is refused; a link to its own place is bound by
// the real path.
func TestSandboxPolicyJudgesAfterResolvingLinks(t *testing.T) {
	t.Parallel()
	w := newWorkdirWorld(t, true)
	own := filepath.Join(w.work, "alpha", "w1")
	require.NoError(t, os.Symlink(filepath.Join(w.work, "beta", "w1"), filepath.Join(own, "evil")))
	_, err := w.alpha.SandboxPolicy(sandbox.Bwrap, filepath.Join(own, "evil"), nil)
	require.ErrorIs(t, err, sandbox.ErrWorkdirRefused)

	require.NoError(t, os.Symlink(own, w.alpha.File("mywork")))
	pol, err := w.alpha.SandboxPolicy(sandbox.Landlock, w.alpha.File("mywork"), nil)
	require.NoError(t, err)
	real, _ := filepath.EvalSymlinks(own)
	require.Equal(t, []string{real}, pol.Work)
	require.Equal(t, real, pol.Dir)

	pol, err = w.alpha.WorkdirAnywherePolicy(sandbox.Bwrap, filepath.Join(own, "evil"), nil)
	require.NoError(t, err, "the workdir-anywhere fault does not judge")
	require.True(t, pol.BindByPath)
	require.Equal(t, []string{filepath.Join(own, "evil")}, pol.Work)

	// Another profile's home, and the folder of every home, too; the
	// launch profile's hidden profiles folder is not hidden over it.
	pol, err = w.alpha.WorkdirAnywherePolicy(sandbox.Bwrap, w.beta.Home, nil)
	require.NoError(t, err)
	require.Equal(t, []string{w.beta.Home}, pol.Work)
	pol, err = w.launch.WorkdirAnywherePolicy(sandbox.Bwrap, w.beta.Home, nil)
	require.NoError(t, err)
	require.Equal(t, w.beta.Home, pol.Dir, "beneath the launch home, bound with it")
	require.Empty(t, pol.Hide)
	pol, err = w.launch.WorkdirAnywherePolicy(sandbox.Bwrap, w.launch.Home, nil)
	require.NoError(t, err)
	require.Equal(t, []string{w.launch.File("profiles")}, pol.Hide, "its own home: the profiles stay hidden")
}

func TestTerminalNetworkIsTheOperators(t *testing.T) {
	t.Parallel()
	w := newWorkdirWorld(t, false)
	got, err := w.alpha.TerminalNetwork()
	require.NoError(t, err)
	require.Equal(t, NetworkSetting{Mode: sandbox.NetNone}, got, "the default")

	write(t, w.alpha.File("config.yaml"), "terminal:\n  network: host\n")
	got, err = w.alpha.TerminalNetwork()
	require.NoError(t, err)
	require.Equal(t, sandbox.NetNone, got.Mode, "a profile's own value is not consulted")

	managed := filepath.Join(w.h.Managed, "config.yaml")
	write(t, managed, "terminal:\n  network: host\n")
	got, err = w.alpha.TerminalNetwork()
	require.NoError(t, err)
	require.Equal(t, NetworkSetting{Mode: sandbox.NetHost, From: managed}, got)

	write(t, managed, "terminal:\n  network: bridge\n")
	_, err = w.alpha.TerminalNetwork()
	require.ErrorIs(t, err, ErrBadConfig)
	require.ErrorContains(t, err, `"bridge"`)
}

// A profile that owns its operator keys (the launch profile of agentd tui,
// or any profile under the tenant-operator-settings fault) sets its own
// terminal.network and terminal.workdir_roots; one that does not, cannot.
func TestOwnOperatorKeysSetNetworkAndRoots(t *testing.T) {
	t.Parallel()
	w := newWorkdirWorld(t, true)
	write(t, w.alpha.File("config.yaml"), "terminal:\n  network: host\n  workdir_roots: [\""+w.work+"\"]\n")
	victim := filepath.Join(w.work, "beta", "w1")
	got, err := w.alpha.TerminalNetwork()
	require.NoError(t, err)
	require.Equal(t, sandbox.NetNone, got.Mode)
	_, err = w.alpha.CheckWorkdir(victim)
	require.ErrorIs(t, err, sandbox.ErrWorkdirRefused, "its own roots do not count")

	owner := w.alpha
	owner.OwnOperatorKeys = true
	got, err = owner.TerminalNetwork()
	require.NoError(t, err)
	require.Equal(t, NetworkSetting{Mode: sandbox.NetHost, From: owner.File("config.yaml")}, got)
	real, err := owner.CheckWorkdir(victim)
	require.NoError(t, err, "its own roots count: the positive control of own-workdir-roots")
	require.Equal(t, victim, real)

	managed := filepath.Join(w.h.Managed, "config.yaml")
	write(t, managed, "terminal:\n  network: none\n")
	got, err = owner.TerminalNetwork()
	require.NoError(t, err)
	require.Equal(t, NetworkSetting{Mode: sandbox.NetNone, From: managed}, got, "the operator's value wins")
}
