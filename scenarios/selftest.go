package scenarios

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
)

// Fault is one bug the embedded target can seed (AGENTD_FAULTS) and what
// must catch it: the scenario that exercises it and the invariant whose
// finding proves it was seen. A self-test runs each fault's scenario with
// the fault on and expects that invariant among the findings.
type Fault struct {
	Name     string
	Scenario string
	Expect   invariants.Invariant
	Why      string // how the leak shows, in one line
}

// Faults is the detection-power catalog: every seeded fault of agentd,
// each modelled on a leak pooled servers really have.
func Faults() []Fault {
	return []Fault{
		{"dotenv-into-process", "pooled-serve", invariants.Snapshot, "a profile's .env lands in the process environment and other profiles' tools inherit it"},
		{"launch-env-bleed", "pooled-serve", invariants.Snapshot, "the launch profile's variables reach every profile's tools"},
		{"shared-shell", "shell-reuse", invariants.Snapshot, "one shell serves every profile: another tenant's cwd and shell state show"},
		{"global-cwd", "settings-writes", invariants.Snapshot, "config.set cwd moves the process's cwd: probes run in another tenant's workdir"},
		{"cron-launch-scope", "pooled-serve", invariants.Request, "cron jobs run in the launch profile's scope: its provider gets other tenants' cron prompts"},
		{"shared-credential", "pooled-serve", invariants.Request, "a process-wide key cache: a provider sees another tenant's key"},
		{"model-bleed", "pooled-serve", invariants.LaunchBleed, "a named profile's session reports the launch model"},
		{"wrong-write-scope", "settings-writes", invariants.WriteScope, "config.set by profile writes the launch profile's config"},
		{"broadcast-events", "pooled-serve", invariants.RPC, "turn events go to every connection"},
		{"shared-state-db", "pooled-serve", invariants.File, "every profile's sessions go into the launch profile's state.db"},
		{"log-secret-encoded", "pooled-serve", invariants.Text, "the server logs a provider key base64-encoded"},
		{"context-lost", "plugin-hosts", invariants.SessionContext, "a nested plugin call runs as the session that started the host"},
		{"plugin-in-process", "plugin-hosts", invariants.PluginBoundary, "plugins.isolation: host is ignored: plugin code runs in the pooled server"},
		{"token-in-tool-env", "pooled-serve", invariants.OperatorSecret, "the serve token reaches every tenant's tool environment"},
		{"tmp-copy", "pooled-serve", invariants.SharedPlace, "tool output is copied into $TMPDIR, a place every tenant's processes share"},
		{"create-copies-launch-env", "profile-lifecycle", invariants.File, "profiles.create copies the launch profile's .env into the new home"},
		{"resume-any-profile", "tenant-authz", invariants.Authz, "session.resume searches every profile's state.db: a tenant resumes another's stored session"},
		{"sequential-sessions", "tenant-authz", invariants.Authz, "live session ids follow a counter: a tenant guesses another's"},
		{"session-follows-id", "tenant-authz", invariants.Authz, "a live session obeys whichever connection names its id"},
		{"save-key-launch-fallback", "settings-writes", invariants.WriteScope, "model.save_key also writes the launch profile's .env when the name is missing there"},
		{"llm-facade-launch-provider", "plugin-hosts", invariants.Request, "a plugin's LLM facade call goes to the launch profile's provider with its key and model"},
		{"global-hooks", "plugin-surfaces", invariants.File, "plugin hooks keyed process-wide: one tenant's hooks are given every tenant's tool calls and turns"},
		{"global-memory", "plugin-surfaces", invariants.File, "memory providers keyed process-wide: one tenant's provider remembers every tenant's turns"},
		{"global-plugin-state", "colliding-inputs", invariants.Request, "plugin state keyed by the key alone: the tenants' one key holds the last writer's value, which the others' plugins read back"},
		{"request-replay-cache", "colliding-inputs", invariants.RPC, "replies kept by method, request id and params, not by connection: a tenant's byte-identical request is answered with another's session"},
		// The defences against hostile tenants: the tool sandbox, containment,
		// the plugin host's PID namespace and the fair scheduler.
		{"no-tool-sandbox", "hostile-tools", invariants.Request, "the terminal runs unsandboxed: a tenant's tool reads the other homes and every process's environment"},
		{"escaped-process", "hostile-tools", invariants.ProcessEscape, "a session's close ends its shell but not what it started with setsid"},
		{"host-shared-pidns", "hostile-plugin", invariants.Request, "plugin hosts share the server's PID namespace: a plugin reads other tenants' /proc/<pid>/environ"},
		{"no-conn-limit", "noisy-neighbour", invariants.Availability, "no per-connection or per-profile limit: one tenant's flood starves the others' turns"},
		{"per-connection-share", "fair-share", invariants.Availability, "the turn queue counts a tenant's turns per connection: spread over eight connections it runs eight times its share at once"},
		// The gateway as a multi-tenant LLM gateway (issue 16).
		{"gateway-any-model", "gateway-tenants", invariants.Authz, "the gateway serves a request naming another profile's model instead of refusing it"},
		{"gateway-failover-foreign", "gateway-failover", invariants.Routing, "a turn whose upstream failed is retried in another profile, on that tenant's provider"},
		// A tenant that chains its own powers (issue 21): each fault switches
		// one defence off, and hostile-chains finds the leak again.
		{"home-follows-links", "hostile-chains", invariants.Request, "home files opened by plain path: a SOUL.md linked to another home's .env puts its secrets in the attacker's prompt"},
		{"unchecked-job-ids", "hostile-chains", invariants.File, "a job id edited to ../../<other>/logs in the tenant's own jobs.json writes the job's output into another home"},
		{"workdir-anywhere", "hostile-chains", invariants.Request, "config.set cwd takes another tenant's workdir (or /proc): the sandbox binds it and the shell reads it"},
		{"tenant-operator-settings", "hostile-chains", invariants.Request, "a profile's own config.yaml sets the plugin host's launcher or terminal.sandbox: none, and reads every home"},
		{"delete-race", "hostile-chains", invariants.File, "a request racing profiles.delete re-makes the home: the profile made again holds the deleted one's files"},
		{"tenant-text-as-path", "hostile-chains", invariants.Request, "a custom prompt's @<path> is read by plain path: the victim's .env goes into the attacker's system prompt"},
		// Two defences off at once: the chain rows that one fault alone
		// cannot re-open (attack.Chain.AlsoFault) land here (a plugins
		// folder linked in is loaded at the next start).
		{"workdir-anywhere,no-tool-sandbox", "hostile-chains", invariants.Snapshot, "a cwd of /dev, unjudged and unsandboxed: the tenant's shell runs in the host's /dev"},
		{"home-follows-links,plugin-in-process", "hostile-restarts", invariants.Request, "a plugins folder linked to another home, loaded in the server: the victim's plugin is the attacker's"},
		// The surface the harness learns (issue 46): each fault takes away one
		// defence of a class no list had named, and the generated attacks
		// find it again.
		{"launcher-env", "surface", invariants.UnsandboxedEnv, "the tool sandbox's launcher starts with the tenant's .env as its own environment: LD_PRELOAD from a tenant's home runs outside every sandbox and reads another home"},
		{"home-special-files", "surface", invariants.ResourceHarm, "home files read with no regular-file check or size limit: a huge sparse .env or config.yaml grows the pooled server without bound"},
		{"launch-mode-isolation", "entry-points", invariants.PluginBoundary, "a server launched on one profile (stdio) runs the plugins of the other profiles it serves in its own process"},
		{"cron-tick-in-process", "entry-points", invariants.PluginBoundary, "the one-shot cron tick loads a tenant's plugins in its own process: a tenant's job reads every home"},
		{"stale-credential", "credential-revocation", invariants.RevokedCredential, "a session-addressed call and a turn in flight skip the credential's re-check: a rotated key keeps driving turns"},
		// The tenant's own .env names the plugin host's keeper switch; a
		// host in a PID namespace of its own needs no keeper, so the
		// namespace goes too.
		{"host-env-trusted,host-shared-pidns", "hostile-plugin", invariants.ProcessEscape, "the plugin host takes AGENTD_PLUGIN_HOST_KEEPER=inner from the tenant's .env: no keeper, and what its plugin started outlives the host"},
	}
}

// Sandbox is the tool sandbox whose defence f takes away (faults.Sandbox of
// any fault it turns on), "" when it is none's.
func (f Fault) Sandbox() string {
	for _, n := range strings.Split(f.Name, ",") {
		if s := faults.Sandbox(faults.Name(n)); s != "" {
			return s
		}
	}
	return ""
}

// SeededUnder splits fs into the faults a self-test seeds where agentd's
// plugin hosts and tools run in the sandbox mode ("bwrap", "landlock",
// "none"), and those it leaves out there: a fault that takes away another
// sandbox's defence changes nothing under this one, so its run would
// measure nothing. A mode of "" (not known) seeds them all.
func SeededUnder(fs []Fault, mode string) (seeded, left []Fault) {
	for _, f := range fs {
		if s := f.Sandbox(); s != "" && mode != "" && s != mode {
			left = append(left, f)
			continue
		}
		seeded = append(seeded, f)
	}
	return seeded, left
}

// clusterCaches are the serve flags of the cluster a self-test seeds
// agentd's cluster faults in: its auth cache and its response cache on,
// where two of them (revocation-local-only, cache-key-no-tenant) live.
var clusterCaches = []string{"--auth-cache-ttl", "10m", "--response-cache-ttl", "10m"}

// SelfTestTarget is the target a self-test runs spec against when given
// target: target itself, or, for a scenario that needs replicas
// (NeedReplicas) or shared stores (NeedStores) when target is the single
// embedded agentd, agentd's cluster variant (harness.AgentdClusterOf:
// three replicas over a PostgreSQL and a Redis the harness starts) with
// its auth and response caches on: where ClusterFaults act.
func SelfTestTarget(spec Spec, target harness.Target) harness.Target {
	needs := slices.Contains(spec.Needs, NeedReplicas) || slices.Contains(spec.Needs, NeedStores)
	if !needs || target.ReplicaCount() > 1 || len(target.Stores) > 0 {
		return target
	}
	if t, ok := harness.AgentdClusterOf(target); ok {
		return t.WithServeArgs(clusterCaches...)
	}
	return target
}

// FaultEnv is the target environment that turns fault on.
func FaultEnv(fault string) map[string]string {
	return map[string]string{"AGENTD_FAULTS": fault, "AGENTD_ALLOW_FAULTS": "1"}
}

// FaultOutcome is one row of a self-test.
type FaultOutcome struct {
	Fault    string               `json:"fault"`
	Scenario string               `json:"scenario"`
	Expected invariants.Invariant `json:"expected"`
	Caught   bool                 `json:"caught"`   // a finding of the expected invariant
	Findings int                  `json:"findings"` // every finding of the faulty run
	Seen     []string             `json:"seen"`     // the invariants the faulty run found, sorted
	Clean    bool                 `json:"clean"`    // the same scenario with no fault passed
	// CleanWhy says why the clean run was not clean: its findings, failed
	// controls and phases.
	CleanWhy string        `json:"clean_why,omitempty"`
	Error    string        `json:"error,omitempty"` // why the fault was missed
	Duration time.Duration `json:"duration_ns"`     // the faulty run's
}

// SelfTestResult is a whole self-test.
type SelfTestResult struct {
	Outcomes []FaultOutcome
	Clean    []Report          // the clean run of every scenario the faults use
	Faulty   map[string]Report // each fault's run, by fault name
}

// Passed reports whether every fault was caught by its expected invariant
// and every clean run was clean.
func (r SelfTestResult) Passed() bool {
	for _, o := range r.Outcomes {
		if !o.Caught || !o.Clean {
			return false
		}
	}
	return len(r.Outcomes) > 0
}

// Caught counts the faults caught by their expected invariant.
func (r SelfTestResult) Caught() int {
	n := 0
	for _, o := range r.Outcomes {
		if o.Caught {
			n++
		}
	}
	return n
}

// validateFaults checks that every fault names a scenario of cat, once.
func validateFaults(cat *Catalog, faults []Fault) error {
	var errs []error
	seen := map[string]bool{}
	for _, f := range faults {
		if seen[f.Name] {
			errs = append(errs, fmt.Errorf("fault %q listed twice", f.Name))
		}
		seen[f.Name] = true
		if _, err := cat.Get(f.Scenario); err != nil {
			errs = append(errs, fmt.Errorf("fault %q: %w", f.Name, err))
		}
		if f.Expect == "" || !f.Expect.Leak() {
			errs = append(errs, fmt.Errorf("fault %q: expected invariant %q is not a leak check", f.Name, f.Expect))
		}
	}
	return errors.Join(errs...)
}

// SelfTestOptions shape a self-test beyond its Config.
type SelfTestOptions struct {
	// Clean are clean runs already made of the catalog's scenarios against
	// the embedded agentd, with the Config the self-test gets (a
	// certification's own catalog run, when its target is the embedded
	// agentd with the self-test's tenants). A fault's scenario found here
	// is not run clean again: its report is the clean run.
	Clean []Report
	// Whole, when it says so for a fault, runs that fault's scenario to its
	// end: by default a faulty run stops after the first phase that found
	// the fault's expected invariant, since the fault is caught then. A
	// check that reads the whole faulty run (every row of a scenario) asks
	// for it.
	Whole func(Fault) bool
	// Catalog is where the runs' sandboxes go (WorkDir, Keep) and how many
	// run at once (Parallel); Run and Each do not apply. Zero fields are
	// taken from the Config's deprecated ones.
	Catalog CatalogOptions
}

// Faulty runs get their timeout from their scenario's clean run: this
// many times its duration, at least faultyFloor, never more than the
// scenario's own timeout. A faulty run that outlives it is stuck (its
// fault hung the target, not slowed it) or missed its fault. The floor
// is room for a busy machine: a faulty run stops once its fault is
// caught, so only a stuck one waits it out (30 s was once too little for
// a plugin scenario's scans beside two other test runs).
const (
	faultySlack = 5
	faultyFloor = 60 * time.Second
)

// faultyTimeout is a faulty run's timeout from its clean run's duration.
func faultyTimeout(spec Spec, cfg Config, clean time.Duration) time.Duration {
	own := cfg.timeoutOf(spec)
	if clean <= 0 {
		return own
	}
	return min(own, max(faultyFloor, faultySlack*clean))
}

// SelfTest runs, for every fault, its scenario with the fault on, and every
// scenario the faults use once with none, cfg.Parallel at a time (see
// SelfTestOptions.Catalog).
func SelfTest(ctx context.Context, cat *Catalog, cfg Config, faults []Fault) (SelfTestResult, error) {
	return SelfTestWith(ctx, cat, cfg, faults, SelfTestOptions{})
}

// SelfTestWith is SelfTest with options: clean runs to reuse, and faults
// to run whole. Each scenario runs clean once (or is taken from
// opts.Clean), and its faults start once its clean run is done, since
// their timeouts come from its duration; scenarios that measure timing run
// alone.
func SelfTestWith(ctx context.Context, cat *Catalog, cfg Config, faults []Fault, opts SelfTestOptions) (SelfTestResult, error) {
	if err := validateFaults(cat, faults); err != nil {
		return SelfTestResult{}, fmt.Errorf("self-test: %w", err)
	}
	if cfg.Seed == 0 {
		cfg.Seed = DrawSeed() // one seed for every clean and faulty run
	}
	runOpts := CatalogOptions{WorkDir: opts.Catalog.WorkDir, Keep: opts.Catalog.Keep, Parallel: opts.Catalog.Parallel}.withConfig(cfg)
	runOpts.Run = ""
	given := map[string]Report{}
	for _, r := range opts.Clean {
		given[r.ID] = r
	}
	// One clean run per scenario the faults use (unless given), then one
	// run per fault.
	type job struct {
		fault Fault // zero for a clean run
		k     int   // the fault's index in faults
		spec  Spec
	}
	var jobs []job
	cleanDone := map[string]chan struct{}{}
	clean := map[string]*Report{}
	var used []string
	for _, f := range faults {
		if _, ok := clean[f.Scenario]; ok {
			continue
		}
		used = append(used, f.Scenario)
		done := make(chan struct{})
		cleanDone[f.Scenario] = done
		if r, ok := given[f.Scenario]; ok {
			clean[f.Scenario] = &r
			close(done)
			continue
		}
		clean[f.Scenario] = &Report{}
		s, _ := cat.Get(f.Scenario)
		jobs = append(jobs, job{spec: s})
	}
	nClean := len(jobs)
	for k, f := range faults {
		s, _ := cat.Get(f.Scenario)
		jobs = append(jobs, job{fault: f, k: k, spec: s})
	}
	// The longest first, so the self-test does not end waiting on a long
	// run started last: clean runs by their scenario's timeout (which
	// stands for its length), faulty ones by their clean run's measured
	// duration when it is given, else the same.
	weight := func(j job) time.Duration {
		if r, ok := given[j.spec.ID]; ok && j.fault.Name != "" && r.Duration > 0 {
			return r.Duration
		}
		return j.spec.Timeout
	}
	for _, part := range [][]job{jobs[:nClean], jobs[nClean:]} {
		sort.SliceStable(part, func(a, b int) bool { return weight(part[a]) > weight(part[b]) })
	}
	faulty := make([]Report, len(faults))
	errs := make([]error, len(faults))
	var cleanErrs []error
	var mu sync.Mutex
	// Every run shares one lock, so a latency-measuring one runs alone
	// among them all (each run takes it in runSpecs).
	cfg.excl = &sync.RWMutex{}
	runJobs(ctx, runOpts.Parallel, len(jobs), nil, nil, func(i int) {
		j := jobs[i]
		c := cfg
		c.Target = SelfTestTarget(j.spec, cfg.Target)
		if j.fault.Name == "" {
			reps, err := runSpecs(ctx, []Spec{j.spec}, c, runOpts, "")
			if len(reps) == 1 {
				*clean[j.spec.ID] = reps[0]
			}
			if err != nil {
				mu.Lock()
				cleanErrs = append(cleanErrs, err)
				mu.Unlock()
			}
			close(cleanDone[j.spec.ID])
			return
		}
		select {
		case <-cleanDone[j.spec.ID]:
		case <-ctx.Done():
			errs[j.k] = ctx.Err()
			return
		}
		c.Target = withEnv(c.Target, FaultEnv(j.fault.Name))
		if cfg.Timeout == 0 {
			c.Timeout = faultyTimeout(j.spec, cfg, clean[j.spec.ID].Duration)
		}
		if opts.Whole == nil || !opts.Whole(j.fault) {
			c.stopOn, c.fault = j.fault.Expect, j.fault.Name
		}
		if c.Progress != nil {
			c.Progress = prefixWriter{w: c.Progress, prefix: "[" + j.fault.Name + "] "}
		}
		reps, err := runSpecs(ctx, []Spec{j.spec}, c, runOpts, j.fault.Name)
		if len(reps) == 1 {
			faulty[j.k] = reps[0]
		}
		errs[j.k] = err
	})
	res := SelfTestResult{Faulty: map[string]Report{}}
	for _, id := range used {
		res.Clean = append(res.Clean, *clean[id])
	}
	for k, f := range faults {
		rep := faulty[k]
		res.Faulty[f.Name] = rep
		cr := clean[f.Scenario]
		o := FaultOutcome{Fault: f.Name, Scenario: f.Scenario, Expected: f.Expect, Clean: cr.Result == Pass,
			Duration: rep.Duration}
		if !o.Clean {
			o.CleanWhy = failureOf(*cr)
		}
		seen := map[string]bool{}
		for _, fd := range rep.Findings() {
			o.Findings++
			seen[string(fd.Invariant)] = true
			if fd.Invariant == f.Expect {
				o.Caught = true
			}
		}
		for s := range seen {
			o.Seen = append(o.Seen, s)
		}
		sort.Strings(o.Seen)
		switch {
		case errs[k] != nil:
			o.Error = errs[k].Error()
		case !o.Caught:
			o.Error = failureOf(rep)
			if o.Error == "" {
				o.Error = fmt.Sprintf("no %s finding (the run found %s)", f.Expect, seenOrNothing(o.Seen))
			}
		}
		res.Outcomes = append(res.Outcomes, o)
	}
	if err := errors.Join(cleanErrs...); err != nil && ctx.Err() == nil {
		return res, fmt.Errorf("self-test: %w", err)
	}
	return res, ctx.Err()
}

func seenOrNothing(seen []string) string {
	if len(seen) == 0 {
		return "nothing"
	}
	return strings.Join(seen, ", ")
}

// failureOf says in one line why a run did not pass: its findings by
// invariant (the first of each), its failed controls and phases, or its
// reason; "" for a run that passed.
func failureOf(r Report) string {
	if r.Result == Pass || r.Result == "" && len(r.Phases) == 0 {
		return ""
	}
	var parts []string
	first := map[invariants.Invariant]invariants.Finding{}
	counts := map[invariants.Invariant]int{}
	var order []invariants.Invariant
	for _, f := range r.Findings() {
		if counts[f.Invariant] == 0 {
			first[f.Invariant] = f
			order = append(order, f.Invariant)
		}
		counts[f.Invariant]++
	}
	for _, inv := range order {
		parts = append(parts, fmt.Sprintf("%d %s finding(s), first: %s", counts[inv], inv, first[inv]))
	}
	for _, p := range r.Phases {
		for _, c := range p.Controls {
			if !c.Passed {
				parts = append(parts, fmt.Sprintf("phase %s: control failed for %s: %s %s", p.Name, c.Tenant, c.Name, c.Detail))
			}
		}
		if p.Error != "" && !strings.HasPrefix(p.Error, "not run: ") {
			parts = append(parts, fmt.Sprintf("phase %s: %s", p.Name, p.Error))
		}
	}
	if r.Reason != "" {
		parts = append(parts, r.Reason)
	}
	if len(parts) == 0 {
		return string(r.Result)
	}
	return strings.Join(parts, "; ")
}

// withEnv returns a copy of target whose processes also get env.
func withEnv(target harness.Target, env map[string]string) harness.Target {
	out := target
	out.Env = map[string]string{}
	for k, v := range target.Env {
		out.Env[k] = v
	}
	for k, v := range env {
		out.Env[k] = v
	}
	return out
}

// prefixWriter prefixes every write (a progress line) with a label.
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, p.prefix+string(b)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// WriteSelfTestTable prints the self-test's table: fault, scenario,
// expected invariant, caught or missed, findings, and whether the clean run
// was clean.
func WriteSelfTestTable(w io.Writer, r SelfTestResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FAULT\tSCENARIO\tEXPECTED\tRESULT\tFINDINGS\tSEEN\tCLEAN RUN")
	for _, o := range r.Outcomes {
		result := "caught"
		if !o.Caught {
			result = "MISSED"
		}
		clean := "clean"
		if !o.Clean {
			clean = "NOT CLEAN"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", o.Fault, o.Scenario, o.Expected, result, o.Findings, strings.Join(o.Seen, ","), clean)
	}
	fmt.Fprintf(tw, "detection power: %d/%d faults caught by their expected invariant\n", r.Caught(), len(r.Outcomes))
	return tw.Flush()
}
