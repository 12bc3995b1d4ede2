package profile

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
)

func TestTerminalSandboxManagedPins(t *testing.T) {
	t.Parallel()
	h, p := testProfile(t, "alpha")

	got, err := p.TerminalSandbox()
	require.NoError(t, err)
	require.Equal(t, SandboxSetting{Mode: sandbox.Auto}, got, "default")

	write(t, p.File("config.yaml"), "terminal:\n  sandbox: none\n")
	got, err = p.TerminalSandbox()
	require.NoError(t, err)
	require.Equal(t, SandboxSetting{Mode: sandbox.Auto, Ignored: []IgnoredKey{{Profile: "alpha", File: p.File("config.yaml"), Key: "terminal.sandbox"}}},
		got, "the profile's own value is ignored: only the operator may set it")

	p.OwnOperatorKeys = true // a profile whose home is the operator's own (agentd tui's launch profile)
	got, err = p.TerminalSandbox()
	require.NoError(t, err)
	require.Equal(t, SandboxSetting{Mode: sandbox.None, From: p.File("config.yaml")}, got, "the profile's own value")

	managed := filepath.Join(h.Managed, "config.yaml")
	write(t, managed, "terminal:\n  sandbox: bwrap\n")
	got, err = p.TerminalSandbox()
	require.NoError(t, err)
	require.Equal(t, SandboxSetting{Mode: sandbox.Bwrap, Pinned: true, From: managed}, got, "the managed scope wins")

	write(t, managed, "terminal:\n  sandbox: chroot\n")
	_, err = p.TerminalSandbox()
	require.ErrorIs(t, err, ErrBadConfig)
	require.ErrorContains(t, err, managed)
	require.ErrorContains(t, err, "terminal.sandbox")
	require.ErrorContains(t, err, `"chroot"`)

	write(t, managed, "")
	write(t, p.File("config.yaml"), "terminal:\n  sandbox: [bwrap]\n")
	_, err = p.TerminalSandbox()
	require.ErrorIs(t, err, ErrBadConfig)
	require.ErrorContains(t, err, p.File("config.yaml"))
}

func TestSandboxPolicyKeepsOtherHomesOut(t *testing.T) {
	t.Parallel()
	h, alpha := testProfile(t, "alpha")
	launch, err := h.Get("")
	require.NoError(t, err)
	self := []string{"/agentd"}

	pol, err := alpha.SandboxPolicy(sandbox.Bwrap, "", self)
	require.NoError(t, err)
	require.Equal(t, sandbox.Policy{Mode: sandbox.Bwrap, Home: alpha.Home, Dir: alpha.Home, Self: self}, pol)

	pol, err = launch.SandboxPolicy(sandbox.Landlock, launch.Home, self)
	require.NoError(t, err)
	require.Equal(t, []string{h.Root()}, pol.Hide, "the launch home's profiles stay hidden")

	work := filepath.Join(filepath.Dir(h.Launch), "work")
	write(t, filepath.Join(h.Managed, "config.yaml"), "terminal:\n  workdir_roots: [\""+work+"/{profile}\"]\n")
	require.NoError(t, os.MkdirAll(filepath.Join(work, "alpha", "w1"), 0o700))
	pol, err = alpha.SandboxPolicy(sandbox.Bwrap, filepath.Join(work, "alpha", "w1"), self)
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join(work, "alpha", "w1")}, pol.Work, "a workdir in its root is bound read-write")
	require.Equal(t, []string{alpha.Home, filepath.Join(work, "alpha")}, pol.Allow, "and judged again at bind time")
	_, err = alpha.SandboxPolicy(sandbox.Bwrap, "/srv", self)
	require.ErrorIs(t, err, sandbox.ErrWorkdirRefused, "a folder outside its home and roots")

	pol, err = alpha.SandboxPolicy(sandbox.Bwrap, alpha.File("work"), self)
	require.NoError(t, err)
	require.Empty(t, pol.Work, "a workdir in the home needs nothing more")

	for _, bad := range []struct {
		p   Profile
		cwd string
	}{
		{alpha, filepath.Join(h.Root(), "beta")}, {alpha, h.Root()}, {alpha, h.Launch}, {alpha, filepath.Join(h.Launch, "logs")},
		{alpha, "/"}, {alpha, filepath.Dir(h.Launch)}, {launch, filepath.Join(h.Root(), "alpha")}, {launch, "/"},
	} {
		_, err := bad.p.SandboxPolicy(sandbox.Bwrap, bad.cwd, self)
		require.ErrorIs(t, err, ErrWorkdirExposes, "profile %s cwd %s", bad.p.Name, bad.cwd)
	}
}

func TestSandboxPolicyNoneConfinesNothing(t *testing.T) {
	t.Parallel()
	h, alpha := testProfile(t, "alpha")
	pol, err := alpha.SandboxPolicy(sandbox.None, h.Launch, nil)
	require.NoError(t, err, "mode none confines nothing, so no workdir exposes anything more")
	require.Equal(t, h.Launch, pol.Dir)
}
