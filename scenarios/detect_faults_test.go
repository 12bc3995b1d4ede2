package scenarios

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// detectFaultNames are the faults of authorization, operator secrets,
// shared places and lifecycle edges, and of the plugin surfaces.
var detectFaultNames = []string{"token-in-tool-env", "tmp-copy", "create-copies-launch-env",
	"resume-any-profile", "sequential-sessions", "session-follows-id", "save-key-launch-fallback",
	"llm-facade-launch-provider", "global-hooks", "global-memory", "global-plugin-state", "request-replay-cache"}

// TestSelfTestDetectFaults runs the self-test for a comma-separated list
// of faults only (DETECT_FAULTS; "detect" names those above, "chains" the
// faults of hostile-chains, whose runs are then checked row by row): a
// quick re-run of a few while working on them. Unset, it is skipped: the
// full matrix runs once in the suite, in TestSelfTestCatchesEverySeededFault.
func TestSelfTestDetectFaults(t *testing.T) {
	t.Parallel()
	v := os.Getenv("DETECT_FAULTS")
	if v == "" {
		t.Skip("DETECT_FAULTS is unset: every fault runs in TestSelfTestCatchesEverySeededFault")
	}
	want := strings.Split(v, ",")
	switch v {
	case "detect":
		want = detectFaultNames
	case "chains":
		want = append([]string(nil), attack.ChainFaults...)
		for _, ch := range attack.Chains() {
			if ch.AlsoFault != "" && !slices.Contains(want, ch.ControlFaults()) {
				want = append(want, ch.ControlFaults())
			}
		}
	}
	var faults, cluster []Fault
	for _, f := range Faults() {
		for _, n := range want {
			if f.Name == n {
				faults = append(faults, f)
			}
		}
	}
	for _, f := range ClusterFaults() {
		if slices.Contains(want, f.Name) {
			cluster = append(cluster, f)
		}
	}
	require.Len(t, append(faults, cluster...), len(want), "every named fault is in Faults() or ClusterFaults()")
	if len(cluster) > 0 {
		selfTestCluster(t, cluster) // agentd in cluster mode
		if len(faults) == 0 {
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// checkChainDetections reads every row of a chain fault's run: those
	// run whole, as in TestSelfTestCatchesEverySeededFault.
	res, rst, runs := selfTestWithRestarts(ctx, t, Config{Target: agentdTarget(), Tenants: 3, WorkDir: t.TempDir(), Parallel: 2}, faults)
	for _, o := range rst.Outcomes {
		assert.True(t, o.Clean, "clean run of %s", o.Scenario)
	}
	assertSelfTestCaught(t, res)
	var chains []string
	for _, f := range attack.ChainFaults {
		if slices.Contains(want, f) {
			chains = append(chains, f)
		}
	}
	checkChainDetections(t, runs, chains)
}

// runOne runs spec alone against target and returns its report.
func runOne(t *testing.T, spec Spec, target harness.Target) Report {
	t.Helper()
	cat, err := NewCatalog(spec)
	require.NoError(t, err)
	reps, err := RunCatalog(context.Background(), cat, Config{Target: target, Tenants: 3, WorkDir: t.TempDir()})
	require.NoError(t, err)
	require.Len(t, reps, 1)
	return reps[0]
}

func findingsOf(rep Report, inv invariants.Invariant) []invariants.Finding {
	var out []invariants.Finding
	for _, f := range rep.Findings() {
		if f.Invariant == inv {
			out = append(out, f)
		}
	}
	return out
}

// findingText is every finding of inv in rep, one a line, failing the
// test if there is none.
func findingText(t *testing.T, rep Report, inv invariants.Invariant) string {
	t.Helper()
	fs := findingsOf(rep, inv)
	require.NotEmpty(t, fs, "want a %s finding; got %v", inv, rep.Findings())
	details := make([]string, 0, len(fs))
	for _, f := range fs {
		details = append(details, f.String())
	}
	return strings.Join(details, "\n")
}

// Secrets planted by hand in shared places (the sandbox's TMPDIR, the
// system temp folder) and the operator's managed secret planted in a
// tenant's home are findings of their invariants: the checks see what
// they look for (positive controls of shared_place and operator_secret).
func TestPlantedSharedPlaceAndOperatorSecretAreCaught(t *testing.T) {
	t.Parallel()
	var sysTmp string
	spec := Spec{
		ID: "planted-shared", Purpose: "plants a tenant's key in shared places and the operator's secret in a home",
		Backends: []harness.Backend{harness.BackendStdio}, Snapshots: perTenant(1), Timeout: 2 * time.Minute,
		Phases: []Phase{
			{Name: "clean", Run: func(e *Env) {
				e.stdioSessions(1)
			}},
			{Name: "plant", Run: func(e *Env) {
				alpha, beta := e.Tenant("alpha"), e.Tenant("beta")
				require.NoError(e.T, os.WriteFile(filepath.Join(e.Box.Tmp, "out.txt"), []byte("key="+beta.ProviderKey()), 0o600))
				f, err := os.CreateTemp("", "planted-shared-*.txt")
				require.NoError(e.T, err)
				sysTmp = f.Name()
				_, err = f.WriteString("key=" + alpha.ProviderKey())
				require.NoError(e.T, err)
				require.NoError(e.T, f.Close())
				secret := e.Box.Operator["managed_secret"]
				require.NotEmpty(e.T, secret, "the harness planted a managed secret")
				require.NoError(e.T, os.WriteFile(filepath.Join(alpha.Home, "memories", "op.md"), []byte(secret), 0o600))
			}},
		},
	}
	t.Cleanup(func() {
		if sysTmp != "" {
			os.Remove(sysTmp)
		}
	})
	rep := runOne(t, spec, agentdTarget())
	assert.Equal(t, Leak, rep.Result)
	assert.Empty(t, rep.Phases[0].Findings, "the clean phase is clean")
	var places []string
	for _, f := range findingsOf(rep, invariants.SharedPlace) {
		places = append(places, f.Where.Path+" "+f.Owner)
	}
	assert.Contains(t, strings.Join(places, "\n"), filepath.Join("tmp", "out.txt")+" beta", "the sandbox TMPDIR is scanned")
	assert.Contains(t, strings.Join(places, "\n"), sysTmp+" alpha", "new entries of the system temp folder are scanned")
	op := findingsOf(rep, invariants.OperatorSecret)
	require.NotEmpty(t, op)
	assert.Equal(t, "alpha", op[0].Tenant)
	assert.Equal(t, invariants.OperatorOwner, op[0].Owner)
}

// The re-created profile's scan sees what a creation copies from the
// launch profile (positive control of profile-recreate).
func TestProfileRecreateSeesInheritance(t *testing.T) {
	t.Parallel()
	rep := runOne(t, profileRecreate(), withEnv(agentdTarget(), FaultEnv("create-copies-launch-env")))
	assert.Equal(t, Leak, rep.Result)
	var inherited []string
	for _, f := range findingsOf(rep, invariants.File) {
		if f.Detail == "a freshly created profile inherits it" {
			inherited = append(inherited, f.String())
		}
	}
	assert.NotEmpty(t, inherited, "findings: %v", rep.Findings())
}

// On a target whose connections all hold the operator's token, the probes
// that address another tenant's profile are skipped with the reason; the
// session-level probes still run and pass.
func TestTenantAuthzWithoutCredentials(t *testing.T) {
	t.Parallel()
	target := agentdTarget()
	target.TenantCredentials = false
	rep := runOne(t, tenantAuthz(), target)
	assert.Equal(t, Pass, rep.Result, "%v", rep.Log)
	require.NotEmpty(t, rep.Skipped)
	assert.Equal(t, string(Authz), rep.Skipped[0].Invariant)
	assert.Equal(t, noCredentials, rep.Skipped[0].Reason)
}

// One seed gives one order of the tenants per scenario; another seed
// another.
func TestSeedReplaysTenantOrder(t *testing.T) {
	t.Parallel()
	var ts []*tenants.Tenant
	for _, n := range []string{"default", "alpha", "beta", "gamma", "delta", "epsilon"} {
		ts = append(ts, &tenants.Tenant{Name: n})
	}
	order := func(seed uint64, id string) string {
		e := &Env{Rand: scenarioRand(seed, id)}
		var names []string
		for _, t := range e.permuted(ts) {
			names = append(names, t.Name)
		}
		return strings.Join(names, ",")
	}
	assert.Equal(t, order(42, "pooled-serve"), order(42, "pooled-serve"), "the same seed replays")
	differs := false
	for s := uint64(1); s < 20 && !differs; s++ {
		differs = order(s, "pooled-serve") != order(42, "pooled-serve")
	}
	assert.True(t, differs, "other seeds give other orders")
	assert.NotZero(t, DrawSeed())
}

// assertSelfTestCaught logs a self-test's table and fails t for each fault
// missed by its expected invariant and each clean run that did not pass.
func assertSelfTestCaught(t *testing.T, res SelfTestResult) {
	t.Helper()
	var table bytes.Buffer
	require.NoError(t, WriteSelfTestTable(&table, res))
	t.Logf("\n%s", table.String())
	for _, o := range res.Outcomes {
		assert.True(t, o.Caught, "%s missed by %s (expected %s, saw %v): %s", o.Fault, o.Scenario, o.Expected, o.Seen, o.Error)
		assert.True(t, o.Clean, "clean run of %s", o.Scenario)
	}
	for _, r := range res.Clean {
		assert.Equal(t, Pass, r.Result, "%s: %v", r.ID, r.Log)
	}
}
