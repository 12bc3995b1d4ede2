package scenarios

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/internal/storeproc"
)

// skipWithoutStores skips t when the machine lacks a store server the
// harness starts (.ci/run installs them).
func skipWithoutStores(t *testing.T) {
	t.Helper()
	for _, k := range storeproc.Kinds {
		if err := storeproc.Available(k); err != nil {
			t.Skipf("%v (.ci/run installs it)", err)
		}
	}
}

// logWriter sends progress lines to the test's log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestCatalogAgainstAgentd runs the whole catalog against the embedded
// target: every invariant after every phase, positive controls included,
// and no process of any run left behind. agentd runs built with the race
// detector, but for a scenario that measures latency (Alone): that one
// judges the build that ships, as its positive control does. The race
// detector makes every request several times dearer, so on a saturated
// machine the flood's refusals alone took the neighbours past their limit
// (p99 1.75 s against 1.16 s, the machine control 1.0x, with two busy
// loops beside the suite), a cost of the instrumentation, not of agentd;
// agentd/cli's flood tests keep that path under the race detector.
func TestCatalogAgainstAgentd(t *testing.T) {
	t.Parallel()
	cfg := Config{Target: agentdRaceTarget(), Tenants: 3}
	for _, spec := range Default().All() {
		t.Run(spec.ID, func(t *testing.T) {
			t.Parallel()
			cfg := cfg
			if spec.Alone {
				cfg.Target = agentdTarget()
			}
			if slices.Contains(spec.Needs, NeedReplicas) {
				// agentd's cluster: its replicas over a PostgreSQL and a
				// Redis the harness starts, as the self-test runs it.
				skipWithoutStores(t)
				cfg.Target = SelfTestTarget(spec, cfg.Target)
			}
			cfg.Progress = logWriter{t}
			rep := RunScenario(t, spec, cfg)
			for _, p := range rep.Phases {
				for _, c := range p.Controls {
					if !c.Passed {
						t.Errorf("control %s of %s failed: %s", c.Name, c.Tenant, c.Detail)
					}
				}
			}
		})
	}
}

// landlockTarget is target with the operator pinning terminal.sandbox:
// landlock, checked to take: agentd's own check says the launch profile
// runs in Landlock.
func landlockTarget(t *testing.T, target harness.Target) harness.Target {
	t.Helper()
	target = target.WithManaged(map[string]any{"terminal": map[string]any{"sandbox": "landlock"}})
	out, err := harness.Preflight(context.Background(), target, t.TempDir())
	if err != nil {
		t.Fatalf("preflight: %v\n%s", err, out)
	}
	if want := "terminal.sandbox is landlock (pinned by the operator"; !strings.Contains(out, want) {
		t.Fatalf("preflight does not say %q:\n%s", want, out)
	}
	return target
}

// TestSandboxedScenariosUnderLandlock runs the scenarios whose plugin
// hosts and shells live in agentd's sandbox with the operator pinning
// terminal.sandbox: landlock, the path a machine without bubblewrap takes
// (auto falls back to it) and CI, which has bubblewrap, never would: a
// plugin host that dies alone must take what it started with it (the
// Landlock keeper, no PID namespace), and the launch profile's plugins
// must work in a home granted entry by entry.
func TestSandboxedScenariosUnderLandlock(t *testing.T) {
	t.Parallel()
	target := landlockTarget(t, agentdTarget())
	cat := Default()
	for _, id := range []string{"hostile-plugin", "plugin-surfaces", "hostile-tools"} {
		spec, err := cat.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(id, func(t *testing.T) {
			t.Parallel()
			// A finding or a failed control fails the test.
			RunScenario(t, spec, Config{Target: target, Tenants: 3, Progress: logWriter{t}})
		})
	}
}
