package scenarios

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// WeakenedManaged is the operator scope that switches agentd's defences
// against hostile tenants off: the terminal unsandboxed (said explicitly,
// as pooled serving demands), plugins in hosts with no launcher around
// them.
var WeakenedManaged = map[string]any{
	"terminal": map[string]any{"sandbox": "none"},
	"plugins":  map[string]any{"isolation": "host", "host": map[string]any{"launcher": []any{}}},
}

// weakenedTarget is the embedded agentd with its defences switched off by
// its operator: the target every hostile scenario must find leaking.
func weakenedTarget() harness.Target { return agentdTarget().WithManaged(WeakenedManaged) }

// pairs reports, for every ordered pair of the base tenants (attacker,
// victim), whether a finding of inv places the victim's canary in the
// attacker's place.
func reached(fs []invariants.Finding, inv invariants.Invariant) map[string]bool {
	out := map[string]bool{}
	for _, f := range fs {
		if f.Invariant == inv && f.Owner != "" && f.Owner != f.Tenant {
			out[f.Tenant+"<-"+f.Owner] = true
		}
	}
	return out
}

func runWeakened(t *testing.T, id string, phases ...string) Report {
	t.Helper()
	return runOn(t, weakenedTarget(), id, phases...)
}

// runOn runs scenario id on tg, which must find leaks, and only leaks:
// every phase completes and every positive control holds. Given phase
// names, it runs only those phases of the scenario (in its order): a test
// that judges some phases need not wait out the others.
func runOn(t *testing.T, tg harness.Target, id string, phases ...string) Report {
	t.Helper()
	reps, err := RunCatalog(context.Background(), phasesOf(t, id, phases...), Config{Target: tg, Tenants: 3, WorkDir: t.TempDir()})
	require.NoError(t, err)
	require.Len(t, reps, 1)
	rep := reps[0]
	require.Equal(t, Leak, rep.Result, "%s against the weakened agentd: %s\n%s", id, rep.Reason, strings.Join(rep.Log, "\n"))
	for _, f := range rep.Findings() {
		assert.True(t, f.Invariant.Leak(), "the attacks run as a harness should: %s", f)
	}
	for _, p := range rep.Phases {
		assert.Empty(t, p.Error, "phase %s", p.Name)
		for _, c := range p.Controls {
			assert.True(t, c.Passed, "control %s of %s: %s", c.Name, c.Tenant, c.Detail)
		}
	}
	return rep
}

// phasesOf is a catalog of the default scenario id alone; given phase
// names, with only those phases (in the scenario's order).
func phasesOf(t *testing.T, id string, phases ...string) *Catalog {
	t.Helper()
	spec, err := Default().Get(id)
	require.NoError(t, err)
	cat, err := NewCatalog(withPhases(t, spec, phases...))
	require.NoError(t, err)
	return cat
}

// withPhases is spec with only the phases named (all of them when none
// is), in its own order.
func withPhases(t *testing.T, spec Spec, phases ...string) Spec {
	t.Helper()
	if len(phases) > 0 {
		spec.Phases = slices.DeleteFunc(slices.Clone(spec.Phases), func(p Phase) bool { return !slices.Contains(phases, p.Name) })
		require.Len(t, spec.Phases, len(phases), "scenario %s has phases %v", spec.ID, phases)
	}
	return spec
}

// names are the base tenants of a three-tenant run.
var names = tenants.Names(3)

// The positive control of the terminal attacks: against agentd with its
// tool sandbox off, every tenant's terminal brings back every other
// tenant's secrets and its writes land in their homes, each finding naming
// the right tenants.
func TestHostileToolsFindsLeaksOnAWeakenedTarget(t *testing.T) {
	t.Parallel()
	if inPlainBinary(t) { // an attack's positive control (see inPlainBinary)
		return
	}
	// What it judges comes from the reads and the writes: the escape
	// phases are the next test's.
	rep := runWeakened(t, "hostile-tools", "connect", "reads", "writes")
	fs := rep.Findings()
	req := reached(fs, invariants.Request)
	for _, a := range names {
		for _, v := range names {
			if a != v {
				assert.True(t, req[a+"<-"+v], "%s's provider received %s's canaries", a, v)
			}
		}
	}
	wrote := map[string]bool{}
	for _, f := range fs {
		if f.Invariant == invariants.File && f.Kind == HostileWrite && f.Owner != f.Tenant {
			wrote[f.Owner] = true
		}
	}
	hits := map[string]bool{}
	for _, h := range rep.Attacks {
		hits[h.Tenant+"/"+h.Row] = true
	}
	for _, a := range names {
		assert.True(t, wrote[a], "%s's write canary landed in another home", a)
		for _, row := range []string{"sibling-homes", "proc-environ"} {
			assert.True(t, hits[a+"/"+row], "row %s of %s reached another tenant", row, a)
		}
	}
}

// escapes lists, per tenant, the lifecycle events its processes outlived.
func escapes(fs []invariants.Finding) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, f := range fs {
		if f.Invariant != invariants.ProcessEscape {
			continue
		}
		if out[f.Tenant] == nil {
			out[f.Tenant] = map[string]bool{}
		}
		for _, ev := range []string{"the close of session", "the deletion of profile", "the server's stop", "the death of " + f.Tenant + "'s plugin host"} {
			if strings.Contains(f.Detail, "outlived "+ev) {
				out[f.Tenant][ev] = true
			}
		}
	}
	return out
}

// agentdKnowsFault reports whether the agentd under test accepts fault
// (one whose agentd side another branch brings is refused as unknown).
func agentdKnowsFault(t *testing.T, fault string) bool {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, agentdBin, "cron", "tick")
	cmd.Env = []string{"HOME=" + dir, "AGENTD_HOME=" + filepath.Join(dir, ".agentd"), "AGENTD_MANAGED_DIR=" + filepath.Join(dir, "managed"),
		"PATH=" + os.Getenv("PATH"), "AGENTD_FAULTS=" + fault, "AGENTD_ALLOW_FAULTS=1"}
	out, _ := cmd.CombinedOutput()
	return !strings.Contains(string(out), "unknown fault")
}

// The positive control of the process-escape check: against agentd with
// its terminal unsandboxed and its containment off (the escaped-process
// fault), every tenant's setsid'd processes outlive their session, the
// profile's deletion and the server's stop, each finding naming its
// tenant.
func TestHostileToolsFindsEscapesOnAWeakenedTarget(t *testing.T) {
	t.Parallel()
	if inPlainBinary(t) { // an attack's positive control (see inPlainBinary)
		return
	}
	if !agentdKnowsFault(t, "escaped-process") {
		t.Skip("this agentd has no escaped-process fault (its containment lands with the sandbox work)")
	}
	// The reads and writes are the previous test's.
	cat := phasesOf(t, "hostile-tools", "connect", "session-close", "profile-delete", "server-stop")
	reps, err := RunCatalog(context.Background(), cat, Config{Target: withEnv(weakenedTarget(), FaultEnv("escaped-process")),
		Tenants: 3, WorkDir: t.TempDir()})
	require.NoError(t, err)
	require.Len(t, reps, 1)
	require.Equal(t, Leak, reps[0].Result, "%s\n%s", reps[0].Reason, strings.Join(reps[0].Log, "\n"))
	esc := escapes(reps[0].Findings())
	var deleted bool
	for _, a := range names {
		assert.True(t, esc[a]["the close of session"], "%s's setsid'd process outlived its session: %v", a, esc[a])
		assert.True(t, esc[a]["the server's stop"], "%s's setsid'd process outlived the server: %v", a, esc[a])
	}
	for _, m := range esc {
		deleted = deleted || m["the deletion of profile"]
	}
	assert.True(t, deleted, "a process of the deleted profile outlived it")
}

// The positive control of the plugin attacks: against agentd whose plugin
// hosts run with no launcher, every tenant's plugin reads every other
// tenant's secrets and its setsid'd grandchild outlives its host.
func TestHostilePluginFindsLeaksOnAWeakenedTarget(t *testing.T) {
	t.Parallel()
	if inPlainBinary(t) { // an attack's positive control (see inPlainBinary)
		return
	}
	rep := runWeakened(t, "hostile-plugin")
	fs := rep.Findings()
	req := reached(fs, invariants.Request)
	esc := escapes(fs)
	hits := map[string]bool{}
	for _, h := range rep.Attacks {
		hits[h.Tenant+"/"+h.Row] = true
	}
	for _, a := range names {
		for _, v := range names {
			if a != v {
				assert.True(t, req[a+"<-"+v], "%s's provider received %s's canaries", a, v)
			}
		}
		// A host that contains its tree (its keeper) ends the grandchild even
		// with no launcher; the scenario's own control proved it was seen.
		t.Logf("%s's plugin grandchild outlived its host: %v", a, esc[a]["the death of "+a+"'s plugin host"])
		for _, row := range []string{"plugin-sibling-homes", "plugin-proc-environ", "plugin-parent-root"} {
			assert.True(t, hits[a+"/"+row], "row %s of %s reached another tenant", row, a)
		}
	}
	var avail []invariants.Finding
	for _, f := range fs {
		if f.Invariant == invariants.Availability {
			avail = append(avail, f)
		}
	}
	assert.Empty(t, avail, "a plugin's hog in its own host takes nothing from the neighbours' plugins")
}

// The positive control of the flood: against agentd with no limit on a
// connection's or a profile's requests (the no-conn-limit fault), one tenant's flood slows every
// other tenant's turns past the allowed multiple of their baseline, and
// the finding names the flooder.
func TestNoisyNeighbourFindsStarvationOnAWeakenedTarget(t *testing.T) {
	t.Parallel()
	if inPlainBinary(t) { // an attack's positive control (see inPlainBinary)
		return
	}
	// An agentd with limits keeps them with its sandbox off: its
	// no-conn-limit fault takes them away (an agentd without limits has no
	// such fault and needs none).
	tg := weakenedTarget()
	if agentdKnowsFault(t, "no-conn-limit") {
		tg = withEnv(tg, FaultEnv("no-conn-limit"))
	}
	rep := runOn(t, tg, "noisy-neighbour")
	for _, line := range rep.Log {
		if strings.Contains(line, "p99") || strings.Contains(line, "probe") {
			t.Log(line)
		}
	}
	require.Len(t, rep.Availability, len(names)-1, "one row per neighbour")
	flooder := rep.Availability[0].Flooder
	slowed := map[string]bool{}
	for _, f := range rep.Findings() {
		if f.Invariant == invariants.Availability && f.Owner == flooder {
			slowed[f.Tenant] = true
		}
	}
	for _, r := range rep.Availability {
		assert.Equal(t, flooder, r.Flooder)
		assert.NotEqual(t, flooder, r.Tenant)
		assert.Greater(t, r.Ratio, invariants.MaxSlowdown, "%s", r.Tenant)
		assert.True(t, slowed[r.Tenant], "%s's turns were slowed by %s's flood: %v", r.Tenant, flooder, rep.Findings())
	}
}

func TestWeakenedTargetWritesItsOperatorScope(t *testing.T) {
	t.Parallel()
	tg := weakenedTarget()
	require.NoError(t, tg.Validate())
	assert.Equal(t, "none", tg.Managed["terminal"].(map[string]any)["sandbox"])
	assert.Equal(t, map[string]any{"terminal": map[string]any{"workdir_roots": []any{"{root}/work/{profile}"}}}, agentdTarget().Managed,
		"the certified target's operator scope declares the tenants' workdir roots, nothing else")
	require.NoError(t, attack.Validate(attack.Terminal()))
}

// atOnce runs every tenant's steps at the same time and waits for all of
// them; one tenant's Fatalf ends its own steps, then the phase, once the
// others are done.
func TestAtOnceRunsEveryTenantAndEndsThePhaseOnAFailure(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a guard, should atOnce run them one by one
	defer cancel()
	ts := []*tenants.Tenant{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	var started sync.WaitGroup
	started.Add(len(ts))
	allStarted := make(chan struct{})
	go func() { started.Wait(); close(allStarted) }()
	var finished atomic.Int32
	var phaseOK, after bool
	out := harness.RunStandalone(context.Background(), "at-once", t.TempDir(), false, func(ht harness.T) {
		e := &Env{T: &recordingT{T: ht}}
		phaseOK = runPhase(e, Phase{Name: "p", Run: func(e *Env) {
			e.atOnce(ts, func(tn *tenants.Tenant) {
				started.Done()
				select {
				case <-allStarted:
				case <-ctx.Done():
					e.T.Fatalf("%s: the others never started alongside it", tn.Name)
				}
				if tn.Name == "b" {
					e.T.Fatalf("b's step failed")
				}
				finished.Add(1)
			})
			after = true
		}})
	})
	assert.False(t, phaseOK, "a tenant's Fatalf ends the phase")
	assert.False(t, after, "nothing after atOnce runs once a tenant failed")
	assert.Equal(t, int32(2), finished.Load(), "the other tenants' steps ran to their end")
	assert.True(t, out.Failed)
	assert.Contains(t, strings.Join(out.Log, "\n"), "b's step failed")
	assert.NotContains(t, strings.Join(out.Log, "\n"), "never started alongside")
}
