package scenarios

import (
	"bytes"
	"context"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/invariants"
)

// The detection-power matrix: every seeded fault of agentd is caught by the
// invariant that should catch it, and the same scenarios are clean with no
// fault. A certification that has never failed proves nothing.
func TestSelfTestCatchesEverySeededFault(t *testing.T) {
	t.Parallel()
	if inPlainBinary(t) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	// checkChainDetections reads every row of the chain faults' runs, so
	// those run whole; every other faulty run stops once it is caught.
	cfg := Config{Target: agentdTarget(), Tenants: 3, WorkDir: t.TempDir(), Parallel: 3}
	seeded, left := SeededUnder(Faults(), string(toolSandbox()))
	for _, f := range left {
		t.Logf("%s not seeded: it takes away %s's defence, and the tools here run under %s", f.Name, f.Sandbox(), toolSandbox())
	}
	res, rst, runs := selfTestWithRestarts(ctx, t, cfg, seeded)
	res = againWhereInconclusive(ctx, t, cfg, res)
	for _, o := range rst.Outcomes {
		assert.True(t, o.Clean, "clean run of %s", o.Scenario)
	}
	var table bytes.Buffer
	require.NoError(t, WriteSelfTestTable(&table, res))
	t.Logf("\n%s", table.String())
	require.Len(t, res.Outcomes, len(seeded))
	for _, o := range res.Outcomes {
		assert.True(t, o.Caught, "%s missed by %s (expected %s, saw %v): %s", o.Fault, o.Scenario, o.Expected, o.Seen, o.Error)
		assert.True(t, o.Clean, "clean run of %s", o.Scenario)
	}
	for _, r := range res.Clean {
		assert.Equal(t, Pass, r.Result, "%s: %v", r.ID, r.Log)
	}
	assert.True(t, res.Passed())
	// The early stop: global-hooks is caught in plugin-surfaces' turns
	// phase, and the phases after it (a session end that waits out the
	// hooks the fault broke) are not run.
	hooks := res.Faulty["global-hooks"]
	assert.Contains(t, hooks.Reason, "stopped after phase", "global-hooks' run went on after its fault was caught")
	assert.Equal(t, "not run: the run stopped once the fault was caught", hooks.Phases[len(hooks.Phases)-1].Error)
	for _, f := range Faults() {
		if chainsScenario(f) {
			assert.NotContains(t, res.Faulty[f.Name].Reason, "stopped after phase", "%s was asked whole", f.Name)
		}
	}
	checkChainDetections(t, runs, attack.ChainFaults)
}

func TestFaultCatalogIsValid(t *testing.T) {
	t.Parallel()
	require.NoError(t, validateFaults(Default(), Faults()))
	// The faults of bubblewrap's PID namespace are left out where the tools
	// run under Landlock, and only they.
	seeded, left := SeededUnder(Faults(), "landlock")
	var names []string
	for _, f := range left {
		names = append(names, f.Name)
	}
	assert.ElementsMatch(t, []string{"host-shared-pidns", "host-env-trusted,host-shared-pidns"}, names)
	assert.Len(t, seeded, len(Faults())-len(left))
	for _, mode := range []string{"bwrap", ""} {
		all, none := SeededUnder(Faults(), mode)
		assert.Len(t, all, len(Faults()), "under %q every fault is seeded", mode)
		assert.Empty(t, none)
	}
	err := validateFaults(Default(), []Fault{{Name: "x", Scenario: "nope", Expect: "request"}, {Name: "x", Scenario: "gateway", Expect: "harness"}})
	assert.ErrorContains(t, err, `fault "x" listed twice`)
	assert.ErrorContains(t, err, `unknown scenario "nope"`)
	assert.ErrorContains(t, err, "is not a leak check")
}

// A job that measures timing runs with no other beside it, while the
// others do run side by side.
func TestRunJobsRunsTimingAlone(t *testing.T) {
	t.Parallel()
	const n = 8
	var mu sync.Mutex
	active, maxBeside, maxAlone := 0, 0, 0
	alone := func(i int) bool { return i == 3 || i == 6 }
	runJobs(t.Context(), 4, n, &sync.RWMutex{}, alone, func(i int) {
		mu.Lock()
		active++
		if alone(i) {
			maxAlone = max(maxAlone, active)
		} else {
			maxBeside = max(maxBeside, active)
		}
		mu.Unlock()
		// Hold the slot until another job is running too, or a while has
		// passed: side-by-side jobs overlap, an alone one never does.
		deadline := time.Now().Add(200 * time.Millisecond)
		for time.Now().Before(deadline) {
			mu.Lock()
			a := active
			if alone(i) {
				maxAlone = max(maxAlone, a)
			}
			mu.Unlock()
			if a > 1 && !alone(i) {
				break
			}
			runtime.Gosched()
		}
		mu.Lock()
		active--
		mu.Unlock()
	})
	assert.Equal(t, 1, maxAlone, "a timing job ran beside another")
	assert.Greater(t, maxBeside, 1, "no two jobs ran at once")
}

func TestFaultyTimeoutComesFromTheCleanRun(t *testing.T) {
	t.Parallel()
	spec := Spec{Timeout: 5 * time.Minute}
	assert.Equal(t, faultyFloor, faultyTimeout(spec, Config{}, time.Second), "a quick scenario gets the floor")
	assert.Equal(t, 20*faultySlack*time.Second, faultyTimeout(spec, Config{}, 20*time.Second))
	assert.Equal(t, 5*time.Minute, faultyTimeout(spec, Config{}, 10*time.Minute), "never more than the scenario's own")
	assert.Equal(t, 5*time.Minute, faultyTimeout(spec, Config{}, 0), "no clean run: the scenario's own")
}

// A run that did not pass says why in one line: its findings by invariant,
// failed controls and phases, and its reason.
func TestFailureOfNamesWhatFailed(t *testing.T) {
	t.Parallel()
	assert.Empty(t, failureOf(Report{Result: Pass}))
	r := Report{Result: Leak, Reason: "stopped after phase turns", Phases: []PhaseReport{
		{Name: "turns", Findings: []invariants.Finding{
			{Invariant: invariants.Request, Detail: "alpha's key in beta's request"},
			{Invariant: invariants.Request, Detail: "again"},
			{Invariant: invariants.File, Detail: "beta's marker in alpha's home"},
		}, Controls: []Control{{Tenant: "alpha", Name: "own key seen", Passed: false, Detail: "no request"}}},
		{Name: "end", Error: "not run: the run stopped once the fault was caught"},
		{Name: "other", Error: "the server hung up"},
	}}
	why := failureOf(r)
	assert.Contains(t, why, "2 request finding(s), first: ")
	assert.Contains(t, why, "alpha's key in beta's request")
	assert.Contains(t, why, "1 file finding(s)")
	assert.Contains(t, why, "phase turns: control failed for alpha: own key seen no request")
	assert.Contains(t, why, "phase other: the server hung up")
	assert.NotContains(t, why, "not run:")
	assert.Contains(t, why, "stopped after phase turns")
}

// Env.Alone waits for the scenarios beside it to end, and holds back new
// ones until its measurement is done.
func TestEnvAloneExcludesOtherScenarios(t *testing.T) {
	t.Parallel()
	excl := &sync.RWMutex{}
	excl.RLock() // this scenario's job
	excl.RLock() // another scenario, running
	e := &Env{excl: excl}
	order := make(chan string, 2) // what happened, in order
	measured := make(chan struct{})
	go func() {
		e.Alone(func() { order <- "measure" })
		close(measured)
	}()
	// Alone is waiting for the other scenario: it ends, then Alone runs.
	require.Eventually(t, func() bool { return writerWaits(excl) }, 10*time.Second, time.Millisecond, "Alone did not ask for the run to itself")
	order <- "other ends"
	excl.RUnlock()
	<-measured
	require.Equal(t, []string{"other ends", "measure"}, drain(order))
	// The job got its share back: a writer cannot get in until it ends.
	require.False(t, excl.TryLock())
	excl.RUnlock()
	require.True(t, excl.TryLock())
}

// TestYieldLetsAloneInBetweenPhases: a scenario that runs alone (or a
// phase that does) waits for the phases running now, not for whole
// scenarios: at its next phase boundary a running scenario lets it in,
// and goes on once it is done.
func TestYieldLetsAloneInBetweenPhases(t *testing.T) {
	t.Parallel()
	excl := &sync.RWMutex{}
	excl.RLock() // a long scenario's job, mid-run
	e := &Env{excl: excl}
	order := make(chan string, 2) // what happened, in order
	alone := make(chan struct{})
	go func() {
		excl.Lock() // noisy-neighbour's job
		order <- "alone"
		excl.Unlock()
		close(alone)
	}()
	require.Eventually(t, func() bool { return writerWaits(excl) }, 10*time.Second, time.Millisecond, "the alone job did not ask for the run")
	e.yield() // the long scenario's next phase boundary
	order <- "next phase"
	<-alone
	require.Equal(t, []string{"alone", "next phase"}, drain(order))
	excl.RUnlock()
	require.True(t, excl.TryLock(), "the scenario's share was not given back whole")
}

// writerWaits reports whether a writer waits on excl: a new share is held
// back.
func writerWaits(excl *sync.RWMutex) bool {
	if excl.TryRLock() {
		excl.RUnlock()
		return false
	}
	return true
}

// drain closes ch and returns what it held, in order.
func drain(ch chan string) []string {
	close(ch)
	var out []string
	for s := range ch {
		out = append(out, s)
	}
	return out
}

// againWhereInconclusive runs a fault again, clean and faulty, when its
// timing check could not judge (the availability control's
// "inconclusive": this test binary's other tests, and other packages',
// saturated the two CPUs under the flood), at most twice: an
// inconclusive measurement is neither a pass nor a miss, and the matrix
// wants one that judged. Each run again is logged.
func againWhereInconclusive(ctx context.Context, t *testing.T, cfg Config, res SelfTestResult) SelfTestResult {
	t.Helper()
	for i, o := range res.Outcomes {
		for try := 1; try <= 2 && (!o.Caught || !o.Clean) && inconclusive(o, res); try++ {
			t.Logf("%s in %s could not be judged (try %d): the machine was saturated; running it again", o.Fault, o.Scenario, try)
			var f Fault
			for _, x := range Faults() {
				if x.Name == o.Fault {
					f = x
				}
			}
			c := cfg
			c.WorkDir = t.TempDir()
			again, err := SelfTestWith(ctx, Default(), c, []Fault{f}, SelfTestOptions{})
			require.NoError(t, err)
			require.Len(t, again.Outcomes, 1)
			o = again.Outcomes[0]
			res.Outcomes[i] = o
			res.Faulty[o.Fault] = again.Faulty[o.Fault]
			for k, r := range res.Clean {
				for _, a := range again.Clean {
					if r.ID == a.ID {
						res.Clean[k] = a
					}
				}
			}
		}
	}
	return res
}

// inconclusive reports whether o's faulty or clean run failed only for
// want of a judgement (a timing check the machine control could not make).
func inconclusive(o FaultOutcome, res SelfTestResult) bool {
	if strings.Contains(o.Error, "inconclusive") || strings.Contains(o.CleanWhy, "inconclusive") {
		return true
	}
	faulty := res.Faulty[o.Fault]
	for _, f := range faulty.Findings() {
		if strings.Contains(f.Detail, "inconclusive") {
			return true
		}
	}
	for _, r := range res.Clean {
		if r.ID == o.Scenario {
			for _, f := range r.Findings() {
				if strings.Contains(f.Detail, "inconclusive") {
					return true
				}
			}
		}
	}
	return false
}

// TestInconclusiveTellsAnUnjudgedTimingCheck: only a run whose timing
// check could not judge is run again, never a plain miss.
func TestInconclusiveTellsAnUnjudgedTimingCheck(t *testing.T) {
	t.Parallel()
	unjudged := invariants.Finding{Invariant: invariants.Control, Tenant: "beta", Detail: "inconclusive: the machine control ran 4.9x slower"}
	res := SelfTestResult{
		Faulty: map[string]Report{"no-conn-limit": {ID: "noisy-neighbour", Phases: []PhaseReport{{Name: "rounds", Findings: []invariants.Finding{unjudged}}}}},
		Clean:  []Report{{ID: "pooled-serve", Phases: []PhaseReport{{Name: "connect"}}}},
	}
	assert.True(t, inconclusive(FaultOutcome{Fault: "no-conn-limit", Scenario: "noisy-neighbour"}, res))
	assert.False(t, inconclusive(FaultOutcome{Fault: "model-bleed", Scenario: "pooled-serve", Error: "no launch_bleed finding"}, res))
}

// inPlainBinary runs the test it is called from in a build without the
// race detector: under the race detector's suite, this body runs only in
// the plain binary, whose exit and "--- PASS" line the parent reads.
func TestInPlainBinaryRunsWithoutTheRaceDetector(t *testing.T) {
	t.Parallel()
	if inPlainBinary(t) {
		return
	}
	require.False(t, raceEnabled, "the body ran in the race-detecting binary")
	if bin := os.Getenv(plainAgentdEnv); bin != "" {
		require.Equal(t, bin, agentdBin, "the plain binary drives its parent's agentd")
	}
	require.FileExists(t, agentdBin)
}
