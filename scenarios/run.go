package scenarios

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/slowproxy"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Config is how each scenario runs: the target, its tenants, its timeout,
// its seed. The options of a run of several scenarios (which ones, where,
// how many at once) are CatalogOptions; Run, WorkDir, Keep and Parallel
// here are their old home, still honoured where CatalogOptions leave them
// zero.
type Config struct {
	Target   harness.Target
	Tenants  int           // tenants per scenario (at least a scenario's MinTenants); default 3
	Timeout  time.Duration // each scenario's timeout in place of its own (shorter or longer); 0 keeps its own
	Progress io.Writer     // progress lines; nil = silent
	// Extras are added to every tenant's home (plugins, faults).
	Extras tenants.HomeExtras
	// Interrupt, when it ends, kills every scenario's processes at once
	// (canary-run's SIGINT); RunCatalog sets it to its context.
	Interrupt context.Context
	// Seed permutes every scenario's tenant order and interleavings (see
	// Env.Rand); 0 draws one. The seed a run used is in every report, and
	// running again with it replays the same orders.
	Seed uint64

	// Deprecated: use CatalogOptions.Run (RunCatalogWith).
	Run string
	// Deprecated: use CatalogOptions.WorkDir (RunCatalogWith, SelfTestOptions.Catalog).
	WorkDir string
	// Deprecated: use CatalogOptions.Keep (RunCatalogWith, SelfTestOptions.Catalog).
	Keep bool
	// Deprecated: use CatalogOptions.Parallel (RunCatalogWith, SelfTestOptions.Catalog).
	Parallel int

	down *targetDown // set by runSpecs: the target could not start
	// stopOn ends a run after the first phase that found this invariant
	// (a self-test's faulty run: its fault is caught then).
	stopOn invariants.Invariant
	// fault is the seeded fault (a comma list) of a self-test's faulty run
	// that stops once caught: the rows of a catalog that name the fault
	// they re-open run alone then (Env.faulty).
	fault string
	// excl is held shared by every running scenario of the run (and of a
	// self-test's runs), and whole by one that measures latency (Spec.Alone,
	// Env.Alone).
	excl *sync.RWMutex
}

// recordingT passes everything to the scenario's T and keeps the failure
// messages for the report.
type recordingT struct {
	harness.T
	mu   sync.Mutex
	log  []string
	skip string // why a phase skipped the scenario (an operation the target does not support)
}

// Skipf inside a phase ends the phase and notes why; runInto skips the
// scenario from its own goroutine once the phase's checks have run.
func (r *recordingT) Skipf(format string, args ...any) {
	r.mu.Lock()
	r.skip = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recordingT) skipped() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.skip
}

func (r *recordingT) Errorf(format string, args ...any) {
	r.T.Helper()
	r.keep(fmt.Sprintf(format, args...))
	r.T.Errorf(format, args...)
}

func (r *recordingT) Fatalf(format string, args ...any) {
	r.T.Helper()
	r.keep(fmt.Sprintf(format, args...))
	r.T.Fatalf(format, args...)
}

func (r *recordingT) keep(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, s)
}

func (r *recordingT) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.log...)
}

// RunScenario runs spec against cfg.Target with t as its test: a sandbox
// of its own, every phase in order, every invariant checked after each
// phase (each finding fails t), and every process reaped at the end. The
// returned report is complete once t's cleanups have run.
func RunScenario(t harness.T, spec Spec, cfg Config) *Report {
	rep := &Report{}
	runInto(t, spec, cfg, rep)
	return rep
}

// runInto is RunScenario filling rep, which stays readable when the
// scenario ends early with Fatalf.
func runInto(t harness.T, spec Spec, cfg Config, rep *Report) {
	n := max(cfg.Tenants, spec.MinTenants, 2)
	if cfg.Tenants == 0 {
		n = max(3, spec.MinTenants)
	}
	if cfg.Seed == 0 {
		cfg.Seed = DrawSeed()
	}
	*rep = Report{ID: spec.ID, Purpose: spec.Purpose, Focus: spec.Focus, Tenants: n, Seed: cfg.Seed}
	rt := &recordingT{T: t}
	start := time.Now()
	var box *harness.Sandbox
	// Registered first, so it runs last: after the sandbox is closed and
	// its survivors are counted.
	t.Cleanup(func() {
		if rep.Result == Skipped {
			return
		}
		rep.Duration = time.Since(start)
		if box != nil {
			for _, tn := range box.Set.Tenants {
				rep.Roster = append(rep.Roster, TenantInfo{Name: tn.Name, Tag: tn.Tag, Launch: tn.Launch})
			}
		}
		rep.Result = verdict(rep, t.Failed())
		if rep.Result != Pass {
			rep.Log = rt.messages()
			t.Logf("%s: seed %d (replay its orders with --seed %d, or Config.Seed)", spec.ID, cfg.Seed, cfg.Seed)
		}
		progress(cfg.Progress, "%-20s %s in %v (%d findings)", spec.ID, rep.Result, rep.Duration.Round(time.Millisecond), len(rep.Findings()))
	})
	if why := spec.unmet(cfg.Target); why != "" {
		rep.Result, rep.Reason = Skipped, why
		progress(cfg.Progress, "%-20s skipped: %s", spec.ID, why)
		t.Skipf("%s on %s: %s", spec.ID, cfg.Target.Name, why)
	}
	timeout := cfg.timeoutOf(spec)
	// The target's processes live until the sandbox stops them in a
	// cleanup, so their context is not t's (a test's is canceled before
	// its cleanups run, which would kill them before a clean stop). A
	// canary-run interrupt still ends them at once.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), timeout)
	t.Cleanup(cancel)
	if cfg.Interrupt != nil {
		stop := context.AfterFunc(cfg.Interrupt, cancel)
		t.Cleanup(func() { stop() })
	}

	root := t.TempDir()
	var err error
	sbOpts := harness.SandboxOptions{
		Tenants: tenants.Options{Names: tenants.Names(n), Responder: spec.Responder},
		Extras:  cfg.Extras,
		Grace:   cfg.Target.TimesFor(cfg.Timeout).Stop,
	}
	if spec.StoreProxies {
		// The proxies' jitter: a random source of its own, from the seed.
		sbOpts.StoreProxies = &slowproxy.Options{Rand: scenarioRand(cfg.Seed, spec.ID+"/store-proxies")}
	}
	box, err = harness.NewSandbox(ctx, root, cfg.Target, sbOpts)
	if err != nil {
		rep.Reason = err.Error()
		rep.NotRun = cfg.down.note(spec.ID, sandboxSetup, err)
		rt.Fatalf("%s: %v", spec.ID, err)
	}
	t.Cleanup(func() {
		if err := box.Close(); err != nil {
			rt.Errorf("%s: %v", spec.ID, err)
		}
	})
	env := &Env{T: rt, Ctx: ctx, Spec: spec, Box: box, Report: rep, Rand: scenarioRand(cfg.Seed, spec.ID), down: cfg.down, excl: cfg.excl,
		faulty: faultyRun{stopOn: cfg.stopOn, fault: cfg.fault}}
	env.Tenants = env.permuted(box.Set.Tenants)
	env.Times = cfg.Target.TimesFor(cfg.Timeout)
	seen := map[string]bool{}
	for _, ph := range spec.Phases {
		env.yield()
		progress(cfg.Progress, "%-20s phase %s", spec.ID, ph.Name)
		pr := PhaseReport{Name: ph.Name}
		phaseStart := time.Now()
		ok := runPhase(env, ph)
		pr.Duration = time.Since(phaseStart)
		switch why := rt.skipped(); {
		case ok:
		case why != "": // a skip: judged below
		default:
			msgs := rt.messages()
			if len(msgs) > 0 {
				pr.Error = msgs[len(msgs)-1]
			} else {
				pr.Error = "the phase failed"
			}
		}
		findings, controls, counts := env.checkAll(ctx)
		for _, f := range findings {
			if !seen[f.String()] {
				seen[f.String()] = true
				pr.Findings = append(pr.Findings, f)
			}
		}
		pr.Controls, pr.Counts = controls, counts
		pr.Counts.Findings = len(pr.Findings)
		rep.Phases = append(rep.Phases, pr)
		for _, f := range pr.Findings {
			rt.Errorf("%s", FindingLine(spec.ID, ph.Name, f))
		}
		progress(cfg.Progress, "%-20s phase %s done in %v: %d requests, %d snapshots, %d frames, %d new findings",
			spec.ID, ph.Name, pr.Duration.Round(time.Millisecond), counts.Requests, counts.Snapshots, counts.Frames, len(pr.Findings))
		if why := rt.skipped(); !ok && why != "" && len(rep.Findings()) == 0 && !t.Failed() {
			rep.Result, rep.Reason = Skipped, why
			progress(cfg.Progress, "%-20s skipped in phase %s: %s", spec.ID, ph.Name, why)
			t.Skipf("%s on %s: %s", spec.ID, cfg.Target.Name, why)
		}
		if cfg.stopOn != "" && ok && ph.Name != spec.Phases[len(spec.Phases)-1].Name && found(rep, cfg.stopOn) {
			// A faulty run whose fault is caught: the rest would only
			// wait out what the fault broke.
			rep.Reason = fmt.Sprintf("stopped after phase %s: its %s finding catches the fault", ph.Name, cfg.stopOn)
			for _, rest := range spec.Phases[len(rep.Phases):] {
				rep.Phases = append(rep.Phases, PhaseReport{Name: rest.Name, Error: "not run: the run stopped once the fault was caught"})
			}
			progress(cfg.Progress, "%-20s %s", spec.ID, rep.Reason)
			return
		}
		if !ok {
			if why := rt.skipped(); why != "" {
				// Skipped part-way in a scenario that cannot be skipped (it
				// found something already): the phase did not run to its end,
				// and must never end in a passing or accepted state.
				rep.Phases[len(rep.Phases)-1].Error = "the phase did not run to its end: " + why
			}
			// The phases after it never ran: each is listed as such, so no
			// later reading (known findings) can count the scenario as run.
			for _, rest := range spec.Phases[len(rep.Phases):] {
				rep.Phases = append(rep.Phases, PhaseReport{Name: rest.Name, Error: "not run: phase " + ph.Name + " ended the scenario"})
			}
			t.FailNow()
		}
	}
}

// runPhase runs one phase in a goroutine of its own, so a Fatalf inside it
// ends the phase, not the checks after it. It reports whether the phase
// completed.
func runPhase(env *Env, ph Phase) bool {
	done := make(chan bool, 1)
	go func() {
		completed := false
		defer func() {
			if r := recover(); r != nil {
				env.T.Errorf("phase %s panicked: %v", ph.Name, r)
			}
			done <- completed
		}()
		ph.Run(env)
		completed = true
	}()
	return <-done
}

// found reports whether r has a finding of inv.
func found(r *Report, inv invariants.Invariant) bool {
	for _, f := range r.Findings() {
		if f.Invariant == inv {
			return true
		}
	}
	return false
}

func verdict(r *Report, failed bool) Result {
	leak := false
	for _, f := range r.Findings() {
		if f.Invariant.Leak() {
			leak = true
		}
	}
	switch {
	case leak:
		return Leak
	case failed:
		return Failed
	}
	return Pass
}

func progress(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, time.Now().Format("15:04:05")+" "+format+"\n", args...)
	}
}

// CatalogOptions are the options of a run of several scenarios, beside
// each scenario's Config: which scenarios, where their sandboxes go, and
// how many run at once.
type CatalogOptions struct {
	Run      string // regexp selecting scenario IDs; "" = all
	WorkDir  string // sandboxes go under it, one folder per scenario
	Keep     bool   // keep the sandboxes for a look
	Parallel int    // scenarios run at once; default 1 (AutoParallel is canary-run's)
	// Each, when set, wraps every scenario's run: it is called in the
	// scenario's own goroutine, holding the scenario's share of the run's
	// lock (a scenario that measures latency runs alone), and calls run
	// once, or not at all to leave the scenario out (it then has no
	// report). run runs the scenario and returns its report; its progress
	// lines go to progress (nil: Config.Progress). Package certify calls
	// t.Run around it, so each scenario is a subtest.
	Each func(spec Spec, run func(progress io.Writer) Report)
}

// withConfig is o with each zero field taken from cfg's deprecated one.
func (o CatalogOptions) withConfig(cfg Config) CatalogOptions {
	if o.Run == "" {
		o.Run = cfg.Run
	}
	if o.WorkDir == "" {
		o.WorkDir = cfg.WorkDir
	}
	o.Keep = o.Keep || cfg.Keep
	if o.Parallel == 0 {
		o.Parallel = cfg.Parallel
	}
	return o
}

// RunCatalog runs the scenarios of cat that cfg.Run selects, cfg.Parallel at
// a time, each in its own sandbox under cfg.WorkDir, and returns their
// reports in catalog order. It is RunCatalogWith with the catalog options
// of cfg's deprecated fields.
func RunCatalog(ctx context.Context, cat *Catalog, cfg Config) ([]Report, error) {
	return RunCatalogWith(ctx, cat, cfg, CatalogOptions{})
}

// RunCatalogWith runs the scenarios of cat that opts.Run selects,
// opts.Parallel at a time, each with cfg in its own sandbox under
// opts.WorkDir, and returns their reports in catalog order.
func RunCatalogWith(ctx context.Context, cat *Catalog, cfg Config, opts CatalogOptions) ([]Report, error) {
	opts = opts.withConfig(cfg)
	specs := cat.All()
	if opts.Run != "" {
		var err error
		if specs, err = cat.Match(opts.Run); err != nil {
			return nil, err
		}
	}
	return runSpecs(ctx, specs, cfg, opts, "")
}

// runSpecs runs specs opts.Parallel at a time, each standalone in a sandbox
// under opts.WorkDir (in a folder named label, when not empty), and returns
// their reports in order.
func runSpecs(ctx context.Context, specs []Spec, cfg Config, opts CatalogOptions, label string) ([]Report, error) {
	if opts.WorkDir == "" {
		return nil, fmt.Errorf("run scenarios: no work dir")
	}
	cfg.Interrupt = ctx
	if cfg.Seed == 0 {
		// One seed for the whole run, so a replay needs one number.
		cfg.Seed = DrawSeed()
	}
	parallel := opts.Parallel
	if cfg.Target.TenantsFile != "" {
		// A staging run's scenarios share one server and one set of
		// tenants: one at a time, so each sees only its own requests.
		parallel = 1
	}
	reports := make([]Report, len(specs))
	ran := make([]bool, len(specs))
	cfg.down = &targetDown{}
	if cfg.excl == nil {
		cfg.excl = &sync.RWMutex{}
	}
	order := longestFirst(specs)
	runJobs(ctx, parallel, len(specs), cfg.excl, func(j int) bool { return specs[order[j]].Alone }, func(j int) {
		i := order[j]
		spec := specs[i]
		run := func(progress io.Writer) Report {
			c := cfg
			if progress != nil {
				c.Progress = progress
			}
			return runStandalone(ctx, spec, c, opts, label)
		}
		if opts.Each == nil {
			reports[i] = run(nil)
			return
		}
		opts.Each(spec, func(progress io.Writer) Report {
			ran[i] = true
			reports[i] = run(progress)
			return reports[i]
		})
	})
	if opts.Each != nil {
		// A scenario Each did not run (a test filter left it out) has no
		// report.
		var out []Report
		for i, r := range reports {
			if ran[i] {
				out = append(out, r)
			}
		}
		reports = out
	}
	return reports, ctx.Err()
}

// runStandalone runs spec on its own (harness.RunStandalone) in a sandbox
// under opts.WorkDir, unless the target is down already.
func runStandalone(ctx context.Context, spec Spec, cfg Config, opts CatalogOptions, label string) Report {
	rep := &Report{ID: spec.ID, Purpose: spec.Purpose, Focus: spec.Focus}
	if why := cfg.down.whyFor(spec.Backends); why != "" && spec.unmet(cfg.Target) == "" {
		rep.Result, rep.Reason, rep.NotRun = Failed, "not run: "+why, why
		progress(cfg.Progress, "%-20s not run: %s", spec.ID, why)
		return *rep
	}
	out := harness.RunStandalone(ctx, spec.ID, filepath.Join(opts.WorkDir, label, spec.ID), opts.Keep, func(t harness.T) {
		runInto(t, spec, cfg, rep)
	})
	if out.Skipped && rep.Result == "" {
		rep.Result = Skipped
	}
	if out.Failed && rep.Result == Pass {
		rep.Result = Failed
	}
	if rep.Result != Pass && len(rep.Log) == 0 {
		rep.Log = out.Log
	}
	return *rep
}

// longestFirst is the order runSpecs starts specs in: the longest first
// (a scenario's timeout, set from how long it takes, stands for its
// length), so the run does not end waiting on one long scenario started
// last; ties keep catalog order. Reports stay in catalog order.
func longestFirst(specs []Spec) []int {
	order := make([]int, len(specs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return specs[order[a]].Timeout > specs[order[b]].Timeout })
	return order
}

// AutoParallel is how many scenarios a run makes at once when not told:
// twice the CPUs, at least 2 and at most 8. A scenario is latency-bound
// (it waits on its target's processes, its providers and the wire far more
// than it computes), so two per CPU keeps the machine busy without one
// run's checks starving another's; latency-measuring scenarios run alone
// anyway (runJobs).
func AutoParallel() int { return min(8, max(2, 2*runtime.NumCPU())) }

// runJobs calls job(0..n-1), parallel at a time (at least one), in
// order, and returns when all have returned. With excl, a job holds it
// shared, or whole when alone(i) says it measures latency: its verdict
// must be the target's, not the machine's, so no other job runs beside it.
func runJobs(ctx context.Context, parallel, n int, excl *sync.RWMutex, alone func(i int) bool, job func(i int)) {
	g, _ := errgroup.WithContext(ctx)
	g.SetLimit(max(1, parallel))
	for i := 0; i < n; i++ {
		g.Go(func() error {
			switch {
			case excl == nil:
			case alone != nil && alone(i):
				excl.Lock()
				defer excl.Unlock()
			default:
				excl.RLock()
				defer excl.RUnlock()
			}
			job(i)
			return nil
		})
	}
	_ = g.Wait()
}

// Alone runs fn with no other scenario of the run beside it: a phase that
// measures latency (a hog's neighbours) must measure the target, not the
// other scenarios on the machine. It waits for the scenarios running now
// to end; none starts until fn returns. A scenario that runs alone
// already (Spec.Alone), or runs by itself, just runs fn.
func (e *Env) Alone(fn func()) {
	if e.excl == nil || e.Spec.Alone {
		fn()
		return
	}
	e.excl.RUnlock() // the share its job holds (runJobs)
	e.excl.Lock()
	defer func() {
		e.excl.Unlock()
		e.excl.RLock() // given back to the job, which lets it go
	}()
	fn()
}

// yield lets a scenario that runs alone, or a phase of another that runs
// alone (Alone), in between two phases of this one: such a wait is then
// bounded by the phases running now, not by whole scenarios (a long one
// would hold everything else up for its whole run).
func (e *Env) yield() {
	if e.excl == nil || e.Spec.Alone {
		return
	}
	e.excl.RUnlock()
	e.excl.RLock()
}

// timeoutOf is spec's timeout in this run: Config.Timeout in place of the
// spec's own when set, shorter (a quick look) or longer (a slow target).
func (cfg Config) timeoutOf(spec Spec) time.Duration {
	if cfg.Timeout > 0 {
		return cfg.Timeout
	}
	return spec.Timeout
}
