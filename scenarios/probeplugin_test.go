package scenarios

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/invariants"
)

// needBwrap skips a test whose target confines its plugin hosts with
// bubblewrap when bubblewrap cannot run here.
func needBwrap(t *testing.T) {
	t.Helper()
	if out, err := exec.Command("bwrap", "--die-with-parent", "--unshare-pid", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true").CombinedOutput(); err != nil {
		t.Skipf("the dialect server confines its plugin hosts with bubblewrap, which cannot run here: %v %s", err, out)
	}
}

// withPluginLeak is the dialect target with its plugin leak switch set.
func withPluginLeak(t *testing.T, leak string) harness.Target {
	tg := dialectTarget(t)
	tg.Env = map[string]string{"DIALECT_PLUGIN_LEAK": leak}
	return tg
}

// The dialect server's own probe plugin (an executable speaking JSON
// lines) runs plugin-hosts: it passes, and the ability it lacks (the LLM
// facade) is a skipped check with its reason, never a pass.
func TestDialectPluginHostsClean(t *testing.T) {
	t.Parallel()
	needBwrap(t)
	rep := runCatalogDialect(t, "plugin-hosts", dialectTarget(t), Pass)
	require.Empty(t, rep.Findings())
	var reasons []string
	for _, s := range rep.Skipped {
		reasons = append(reasons, s.Invariant+": "+s.Reason)
	}
	assert.Contains(t, strings.Join(reasons, "\n"), "request: the probe plugin dialectprobe cannot call the server's LLM facade as its session: dialectserver gives plugins no LLM facade")
	assert.NotContains(t, strings.Join(reasons, "\n"), "plugin_sandbox", "the target declares its hosts confined: the cross-home reads were checked")
}

// Each of the dialect server's plugin leak switches plants a leak that
// plugin-hosts finds through the server's own probe plugin, under the
// invariant it breaks.
func TestDialectPluginLeaksAreFound(t *testing.T) {
	t.Parallel()
	needBwrap(t)
	for _, c := range []struct {
		leak   string
		inv    invariants.Invariant
		detail string
	}{
		{"shared-host", invariants.PluginBoundary, "share the plugin host"},
		{"server-env", invariants.OperatorSecret, ""},
		{"unconfined", invariants.PluginBoundary, "the sandboxed plugin read"},
		{"tenant-state", invariants.SessionContext, "ran as another session"},
	} {
		t.Run(c.leak, func(t *testing.T) {
			t.Parallel()
			rep := runCatalogDialect(t, "plugin-hosts", withPluginLeak(t, c.leak), Leak)
			var got []string
			found := false
			for _, f := range rep.Findings() {
				got = append(got, f.String())
				found = found || (f.Invariant == c.inv && strings.Contains(f.Detail, c.detail))
			}
			require.True(t, found, "no %s finding %q among:\n%s", c.inv, c.detail, strings.Join(got, "\n"))
		})
	}
}

// hostile-plugin runs harness/attack's plugin rows through the dialect
// server's probe plugin: confined hosts refuse them all and the hog is
// skipped with the reason the target gives; unconfined hosts let every
// attacker read the other homes.
func TestDialectHostilePlugin(t *testing.T) {
	t.Parallel()
	needBwrap(t)
	spec, err := Default().Get("hostile-plugin")
	require.NoError(t, err)
	t.Run("confined", func(t *testing.T) {
		t.Parallel()
		rep := runDialectWant(t, spec, dialectTarget(t), Pass)
		var reasons []string
		for _, s := range rep.Skipped {
			reasons = append(reasons, s.Invariant+": "+s.Reason)
		}
		assert.Contains(t, strings.Join(reasons, "\n"), "availability: the probe plugin dialectprobe cannot hog its host past the call's deadline: dialectserver sets no limits")
	})
	t.Run("unconfined", func(t *testing.T) {
		t.Parallel()
		rep := runDialectWant(t, spec, withPluginLeak(t, "unconfined"), Leak)
		hits := map[string]bool{}
		for _, h := range rep.Attacks {
			hits[h.Row] = true
		}
		assert.True(t, hits["plugin-sibling-homes"], "no attacker's plugin read another home: %+v", rep.Attacks)
	})
}

// The embedded agentd's probe plugin is the default probe_plugin, on the
// same code path as a target's own: plugin-hosts passes through it.
func TestAgentdProbePluginIsTheDefault(t *testing.T) {
	t.Parallel()
	require.Nil(t, agentdTarget().ProbePlugin)
	pp := probePluginOf(agentdTarget())
	require.Equal(t, PluginName, pp.Name)
	require.True(t, pp.UsesLauncher(), "agentd's install takes the harness's launcher")
	require.True(t, pp.IsHost("agentd plugin-host --profile x"))
	reps, err := RunCatalog(t.Context(), Default(), Config{Target: agentdTarget(), Tenants: 2, WorkDir: t.TempDir(), Run: "^plugin-hosts$"})
	require.NoError(t, err)
	require.Len(t, reps, 1)
	require.Equal(t, Pass, reps[0].Result, "%s\n%s", reps[0].Reason, strings.Join(reps[0].Log, "\n"))
}

// The hostile run's host memory limit follows the build of the target's
// binary: agentd as this module builds it, without the race detector,
// gets the lower limit (its hog ends sooner); a race build, another
// module's binary or a program whose build cannot be read gets the one
// every build loads its plugins under.
func TestHostMemoryLimitFollowsTheBuild(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		argv []string
		want string
	}{
		{nil, ""},
		{[]string{"/bin/agentd", "serve"}, "/bin/agentd"},
		{[]string{"/usr/bin/env", "TENANTCANARY_COMMAND=agentd", "/bin/canary-run", "serve"}, "/bin/canary-run"},
		{[]string{"env", "A=1", "B=2", "./agentd"}, "./agentd"},
		{[]string{"/usr/bin/env", "-i", "/bin/agentd"}, ""},
		{[]string{"/usr/bin/env", "A=1"}, ""},
	} {
		assert.Equal(t, c.want, programOf(c.argv), "%q", c.argv)
	}

	assert.Equal(t, attack.HostMemoryLimitPlain, hostMemoryLimitOf(agentdTarget()), "agentd built without the race detector")
	if agentdRaceIn != "" {
		assert.Equal(t, attack.HostMemoryLimit, hostMemoryLimitOf(agentdRaceTarget()), "agentd built with the race detector")
	}
	goBin, err := exec.LookPath("go")
	require.NoError(t, err)
	assert.Equal(t, attack.HostMemoryLimit, hostMemoryLimitOf(harness.AgentdTarget(goBin)), "another module's Go binary")
	script := filepath.Join(t.TempDir(), "agentd.sh")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\nexec agentd \"$@\"\n"), 0o755))
	assert.Equal(t, attack.HostMemoryLimit, hostMemoryLimitOf(harness.AgentdTarget(script)), "a wrapper script")
	assert.Equal(t, attack.HostMemoryLimit, hostMemoryLimitOf(harness.Target{}), "no serve command")

	limit := func(pp *harness.ProbePlugin) any {
		return pp.Install.Limits["plugins"].(map[string]any)["host"].(map[string]any)["memory_limit"]
	}
	assert.Equal(t, attack.HostMemoryLimitPlain, limit(probePluginOf(agentdTarget())))
	assert.Equal(t, attack.HostMemoryLimit, limit(AgentdProbePlugin()), "the exported default stays the one every build loads under")
}
