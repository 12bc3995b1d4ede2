package scenarios

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// failedRanControls lists the ran-control failures of rep (findings named
// "... did not run: ...").
func failedRanControls(rep *Report) []string {
	var out []string
	for _, f := range rep.Findings() {
		if f.Invariant == invariants.Control && strings.Contains(f.Detail, " did not run: ") {
			out = append(out, f.Detail)
		}
	}
	return out
}

// ranControls lists the ran-controls of rep's phases.
func ranControls(rep *Report) []Control {
	var out []Control
	for _, p := range rep.Phases {
		for _, c := range p.Controls {
			if strings.HasPrefix(c.Name, "every attack and probe proven to have run") {
				out = append(out, c)
			}
		}
	}
	return out
}

// TestCatalogAgainstDialectServer runs what issue 27 and 21 need of the
// dialect test server: hostile-tools with wrapped prompts (every attack
// proven to have run), the same with the instruction mangled (the
// ran-controls fail by name), tenant-authz with unsupported operations
// (skipped rows, not a failed phase), and colliding inputs (clean, and
// against a cache shared across tenants).
func TestCatalogAgainstDialectServer(t *testing.T) {
	t.Parallel()
	t.Run("wrapped/hostile-tools", func(t *testing.T) {
		t.Parallel()
		tg := dialectTarget(t)
		tg.Env = map[string]string{"DIALECT_WRAP": "1"}
		rep, out := runDialect(t, hostileTools(), tg)
		log := strings.Join(out.Log, "\n")
		assert.Empty(t, failedRanControls(rep), "log:\n%s", log)
		for _, p := range rep.Phases {
			assert.Empty(t, p.Error, "phase %s; log:\n%s", p.Name, log)
		}
		// The dialect server runs its tools unsandboxed: the reads reach
		// the other tenant, which only an attack that ran can show.
		assert.Equal(t, Leak, rep.Result, "log:\n%s", log)
		require.NotEmpty(t, rep.Attacks, "no attack reached the other tenant")
		rows := len(attack.Of(attack.Terminal(), attack.Read)) + len(attack.Of(attack.Terminal(), attack.Flood))
		ctls := ranControls(rep)
		require.NotEmpty(t, ctls)
		for _, c := range ctls {
			assert.True(t, c.Passed, "%+v", c)
		}
		var reads *PhaseReport
		for i := range rep.Phases {
			if rep.Phases[i].Name == "reads" {
				reads = &rep.Phases[i]
			}
		}
		require.NotNil(t, reads)
		proven := 0
		for _, c := range reads.Controls {
			if strings.HasPrefix(c.Name, "every attack and probe proven to have run") {
				assert.Contains(t, c.Name, "(", "the count is named")
				proven++
			}
		}
		assert.Equal(t, 2, proven, "a ran-control per attacker in the reads phase (%d rows each)", rows)
		for _, f := range rep.Findings() {
			assert.NotEqual(t, invariants.Harness, f.Invariant, "no turn looped: %s", f)
		}
		// The server ends no tool's processes: its target file's 3 s
		// escape grace still finds them, after each ending event.
		esc := escapes(findingsOf(*rep, invariants.ProcessEscape))
		for _, ev := range []string{"the close of session", "the deletion of profile", "the server's stop"} {
			outlived := false
			for _, m := range esc {
				outlived = outlived || m[ev]
			}
			assert.True(t, outlived, "no process outlived %s: %v", ev, esc)
		}
	})
	t.Run("rewritten-ids/hostile-tools", func(t *testing.T) {
		// A server that rewrites the model's tool-call ids (drops "-",
		// suffixes repeats): every attack is still proven to have run, no
		// turn loops, and the reads still reach the other tenant (the
		// dialect server runs its tools unsandboxed: its leak).
		t.Parallel()
		tg := dialectTarget(t)
		tg.Env = map[string]string{"DIALECT_IDS": "rewrite", "DIALECT_WRAP": "1"}
		spec := hostileTools()
		spec.Phases = spec.Phases[:2] // connect, reads
		rep, out := runDialect(t, spec, tg)
		log := strings.Join(out.Log, "\n")
		assert.Empty(t, failedRanControls(rep), "log:\n%s", log)
		ctls := ranControls(rep)
		require.NotEmpty(t, ctls)
		for _, c := range ctls {
			assert.True(t, c.Passed, "%+v", c)
		}
		for _, f := range rep.Findings() {
			assert.NotEqual(t, invariants.Harness, f.Invariant, "no turn looped: %s", f)
		}
		assert.Equal(t, Leak, rep.Result, "log:\n%s", log)
		require.NotEmpty(t, rep.Attacks, "no attack reached the other tenant")
		for _, s := range rep.Skipped {
			assert.NotContains(t, s.Reason, "cannot tell", "every result was tied to its call")
		}
	})
	t.Run("ns-per-call/hostile-tools", func(t *testing.T) {
		// A server that runs each terminal call in a PID namespace of its
		// own leaves no process to see after the call: the escape check's
		// positive control is then a call that holds its marked process
		// open, and the target is known to end a call's processes (the
		// other case, processes that outlive their calls, is
		// wrapped/hostile-tools: every ending event finds them).
		t.Parallel()
		if _, err := exec.LookPath("bwrap"); err != nil {
			t.Skip("no bubblewrap on this machine: the dialect server's PID namespace per call needs it")
		}
		tg := dialectTarget(t)
		tg.Env = map[string]string{"DIALECT_TOOL_NS": "1"}
		rep, out := runDialect(t, withPhases(t, hostileTools(), "connect", "session-close"), tg)
		log := strings.Join(out.Log, "\n")
		assert.Empty(t, findingsOf(*rep, invariants.Control), "the held call's mark was seen; log:\n%s", log)
		assert.Empty(t, findingsOf(*rep, invariants.ProcessEscape), "log:\n%s", log)
		// An attacker's first look may still catch its spawned processes
		// while the namespace is torn down after the call (bubblewrap's
		// init has exited; the kernel has not yet reaped them): that
		// attacker then proves its mark seen that way, and concludes
		// nothing. At least one must conclude.
		ended := 0
		for _, tn := range []string{"default", "alpha"} {
			if strings.Contains(log, tn+": the target ends a terminal call's processes with the call") {
				ended++
			}
		}
		assert.Positive(t, ended, "no attacker found that the target ends a call's processes; log:\n%s", log)
	})
	t.Run("mangled/hostile-tools", func(t *testing.T) {
		t.Parallel()
		tg := dialectTarget(t)
		tg.Env = map[string]string{"DIALECT_WRAP": "mangle"}
		spec := hostileTools()
		spec.Phases = spec.Phases[:2] // connect, reads
		rep, out := runDialect(t, spec, tg)
		failed := failedRanControls(rep)
		require.NotEmpty(t, failed, "log:\n%s", strings.Join(out.Log, "\n"))
		for _, want := range []string{"attack sibling-homes of default did not run: its provider was never asked with the attack's nonce",
			"attack proc-environ of alpha did not run: its provider was never asked with the attack's nonce"} {
			assert.True(t, strings.Contains(strings.Join(failed, "\n"), want), "no %q among\n%s", want, strings.Join(failed, "\n"))
		}
		assert.NotEqual(t, Pass, rep.Result)
		assert.Empty(t, rep.Attacks, "no attack ran, so none reached anyone")
		for _, c := range ranControls(rep) {
			if c.Tenant != "" && strings.Contains(c.Detail, "attack") {
				assert.False(t, c.Passed, "%+v", c)
			}
		}
	})
	t.Run("lose-results/probe", func(t *testing.T) {
		// A server that never hands the tool result back loops: the fake
		// provider ends the turn at its bound, and the scenario names both
		// the loop and the probe that did not run.
		t.Parallel()
		tg := dialectTarget(t)
		tg.Env = map[string]string{"DIALECT_WRAP": "lose-results"}
		spec := dialectProbeSpec()
		spec.Phases = spec.Phases[:1]
		rep, out := runDialect(t, spec, tg)
		assert.NotEqual(t, Pass, rep.Result)
		var loops []string
		for _, f := range rep.Findings() {
			if f.Invariant == invariants.Harness && strings.Contains(f.Detail, "looped past") {
				loops = append(loops, f.Tenant)
			}
		}
		assert.Len(t, loops, 2, "a loop finding per tenant; log:\n%s", strings.Join(out.Log, "\n"))
		failed := strings.Join(failedRanControls(rep), "\n")
		assert.Contains(t, failed, "the probe turn ")
		assert.Contains(t, failed, "did not run: no environment snapshot came back as the probe call's result")
	})
	t.Run("tenant-authz", func(t *testing.T) {
		t.Parallel()
		rep := runDialectWant(t, tenantAuthz(), dialectTarget(t), Pass)
		var reasons []string
		for _, s := range rep.Skipped {
			reasons = append(reasons, s.Reason)
		}
		all := strings.Join(reasons, "\n")
		assert.Contains(t, all, "cron.create is unsupported by the target: dialectserver has no cron")
		assert.Contains(t, all, `probe "config.set by the owner's live session" (config.set) not made: dialectserver has no settings methods`)
	})
	t.Run("launch-env/settings-writes", func(t *testing.T) {
		// The connect phase finds the launch bleed; the writes phase then
		// meets an unsupported operation: the scenario cannot be skipped,
		// and the phase that did not run to its end (and the one after it)
		// must say so, so nothing can later count the scenario as run.
		t.Parallel()
		tg := dialectTarget(t)
		tg.Env = map[string]string{"DIALECT_LEAK": "launch-env"}
		rep := runDialectWant(t, settingsWrites(), tg, Leak)
		errs := map[string]string{}
		for _, p := range rep.Phases {
			errs[p.Name] = p.Error
		}
		assert.Contains(t, errs["writes"], "the phase did not run to its end: config.set.cwd is unsupported")
		assert.Equal(t, "not run: phase writes ended the scenario", errs["next-turns"])
	})
	t.Run("colliding-inputs", func(t *testing.T) {
		t.Parallel()
		tg := dialectTarget(t)
		tg.Env = map[string]string{"DIALECT_WRAP": "1"}
		rep := runDialectWant(t, collidingInputs(), tg, Pass)
		require.Len(t, rep.Phases, len(collidingInputs().Phases))
		require.NotEmpty(t, rep.Skipped, "the cron rows are skipped with the reason")
	})
	t.Run("shared-cache/colliding-inputs", func(t *testing.T) {
		t.Parallel()
		tg := dialectTarget(t)
		tg.Env = map[string]string{"DIALECT_LEAK": "shared-cache"}
		rep := runDialectWant(t, collidingInputs(), tg, Leak)
		found := false
		for _, f := range rep.Findings() {
			if f.Invariant == invariants.RPC && f.Kind == tenants.Reply && f.Owner != f.Tenant {
				found = true
			}
		}
		assert.True(t, found, "no RPC finding of another tenant's reply canary among %v", rep.Findings())
	})
}
