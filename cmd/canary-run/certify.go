package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/agentd/server"
	"github.com/tenantcanary/tenantcanary/certificate"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/scenarios"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Limits of --tenants.
const (
	minTenants = 2 // isolation needs someone to be isolated from
	maxTenants = 100
)

const runUsage = "usage: canary-run [--target agentd|FILE] [--tenants N] [--run REGEXP] [--shard K/N] [--out DIR] [--keep] [--timeout D] [--parallel N] [--seed N] [--self-test | --no-self-test]"

// certifyOptions are the main run's flags.
type certifyOptions struct {
	target   string
	tenants  int
	run      string
	out      string
	keep     bool
	timeout  time.Duration
	parallel int
	selfTest bool
	noSelf   bool
	shard    string // K/N as given
	seed     uint64
}

// errHelp: -h was asked for.
var errHelp = errors.New("help requested")

// certifyFlags declares the run's flags.
func certifyFlags() (*flag.FlagSet, *certifyOptions) {
	o := &certifyOptions{}
	fs := flag.NewFlagSet("canary-run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.target, "target", "agentd", "the embedded `agentd`, or a target YAML FILE")
	fs.IntVar(&o.tenants, "tenants", 3, "tenants per scenario (2 to 100)")
	fs.StringVar(&o.run, "run", "", "run only the scenarios whose ID matches this `REGEXP`")
	fs.StringVar(&o.out, "out", "canary-out", "write the certificate into this `DIR`")
	fs.BoolVar(&o.keep, "keep", false, "keep the work tree (sandboxes, homes, logs) under DIR/work for a look")
	fs.DurationVar(&o.timeout, "timeout", 0, "each scenario's timeout, shorter or longer than its own (0: each scenario's own)")
	fs.IntVar(&o.parallel, "parallel", 0, "scenarios run at once (0: twice the CPUs, 2 to 8; a scenario that measures latency always runs alone)")
	fs.BoolVar(&o.selfTest, "self-test", false, "only prove the harness catches every seeded leak of the embedded agentd (and that the same scenarios are clean); exit 0 when it does")
	fs.Uint64Var(&o.seed, "seed", 0, "replay a run's tenant orders and interleavings with its seed `N` (printed and in the certificate; 0 draws one)")
	fs.BoolVar(&o.noSelf, "no-self-test", false, "certify without measuring the harness's detection power (the certificate says it was not measured)")
	fs.StringVar(&o.shard, "shard", "", "run only slice `K/N` of the selected scenarios (every Nth from the Kth, in catalog order); shard 1 also measures the detection power; join the shards' certificates with canary-run merge")
	return fs, o
}

func parseCertify(args []string) (certifyOptions, error) {
	fs, o := certifyFlags()
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return *o, errHelp
		}
		return *o, err
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected argument %q (a run takes only flags)", fs.Arg(0)))
	}
	if o.target == "" {
		errs = append(errs, errors.New("--target is empty: give agentd or a target file"))
	}
	if o.tenants < minTenants || o.tenants > maxTenants {
		errs = append(errs, fmt.Errorf("--tenants %d: want %d to %d", o.tenants, minTenants, maxTenants))
	}
	if o.out == "" {
		errs = append(errs, errors.New("--out is empty"))
	}
	if o.timeout < 0 {
		errs = append(errs, fmt.Errorf("--timeout %v: want 0 or more", o.timeout))
	}
	if o.parallel < 0 {
		errs = append(errs, fmt.Errorf("--parallel %d: want 0 (automatic) or more", o.parallel))
	}
	if o.parallel == 0 {
		o.parallel = scenarios.AutoParallel()
	}
	if o.selfTest && o.noSelf {
		errs = append(errs, errors.New("--self-test and --no-self-test exclude each other"))
	}
	if o.selfTest && o.run != "" {
		errs = append(errs, errors.New("--self-test runs the scenarios every fault needs: --run does not apply"))
	}
	if o.run != "" {
		if _, err := scenarios.Default().Match(o.run); err != nil {
			errs = append(errs, err)
		}
	}
	if o.shard != "" {
		if o.selfTest {
			errs = append(errs, errors.New("--self-test runs the whole fault matrix: --shard does not apply"))
		} else if _, err := shardRun(o.run, o.shard); err != nil {
			errs = append(errs, err)
		}
	}
	return *o, errors.Join(errs...)
}

// loadTarget is the embedded agentd (this binary re-executed as
// `canary-run agentd ...`) or a target file.
func loadTarget(name string) (harness.Target, certificate.Target, error) {
	if name == "agentd" {
		exe, err := os.Executable()
		if err != nil {
			return harness.Target{}, certificate.Target{}, fmt.Errorf("find this binary to run the embedded agentd: %w", err)
		}
		t := harness.AgentdTarget(exe, "agentd")
		return t, certificate.Target{Name: t.Name, Version: server.Version}, nil
	}
	t, err := harness.LoadTarget(name)
	if err != nil {
		return harness.Target{}, certificate.Target{}, err
	}
	return t, certificate.Target{Name: t.Name, Version: t.Version,
		Behaviours: map[string]string{"unknown_profile": t.Dialect.WithDefaults().Behaviours.UnknownProfile}}, nil
}

// runCertify is the main run: the catalog, the certificate, the verdict.
func runCertify(ctx context.Context, args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	o, err := parseCertify(args)
	if errors.Is(err, errHelp) {
		printHelp(stdout)
		return 0
	}
	if err != nil {
		return usageError(stderr, "canary-run", err, runUsage)
	}
	target, certTarget, err := loadTarget(o.target)
	if err != nil {
		return usageError(stderr, "canary-run", err, runUsage)
	}
	out, err := filepath.Abs(o.out)
	if err == nil {
		// Fail now, not after the whole catalog ran.
		err = os.MkdirAll(out, 0o755)
	}
	if err != nil {
		return usageError(stderr, "canary-run", fmt.Errorf("--out %q: %w", o.out, err), runUsage)
	}

	var shard *certificate.Shard
	if o.shard != "" {
		sh, _ := shardRun(o.run, o.shard) // checked by parseCertify
		shard = &sh.Shard
		o.run = sh.Run
		if sh.K > 1 {
			o.noSelf = true // shard 1 measures the detection power for all
		}
		fmt.Fprintf(stderr, "canary-run: shard %d/%d: %s\n", sh.K, sh.N, strings.Join(sh.IDs, ", "))
	}
	if o.seed == 0 {
		o.seed = scenarios.DrawSeed()
	}
	fmt.Fprintf(stderr, "canary-run: seed %d (replay with --seed %d)\n", o.seed, o.seed)
	start := time.Now()
	var reports []scenarios.Report
	var runErr error
	var st stages
	if !o.selfTest {
		runErr = st.time("preflight", func() error { return preflight(ctx, out, o, target, stderr) })
		if runErr == nil {
			runErr = st.time("catalog", func() (err error) {
				reports, err = runWork(ctx, out, o, stderr, func(work string) ([]scenarios.Report, error) {
					return scenarios.RunCatalog(ctx, scenarios.Default(), catalogConfig(o, target, work, stderr))
				})
				return err
			})
		}
	}
	var power *certificate.DetectionPower
	var selfErr error
	if !o.noSelf && runErr == nil {
		selfErr = st.time("self-test", func() (err error) {
			// The embedded agentd passed its preflight for the catalog
			// already: the self-test runs the same binary here.
			preflighted := !o.selfTest && o.target == "agentd"
			power, err = selfTest(ctx, out, o, preflighted, reusable(o, reports), stdout, stderr)
			return err
		})
	}
	fmt.Fprintf(stderr, "canary-run: stages: %s\n", st)
	ts := certificate.TenantsOf(reports)
	if len(ts) == 0 {
		ts = tenantsOf(o.tenants)
	}
	cert := certificate.New(certTarget, ts, reports, time.Since(start))
	cert.DetectionPower = power
	cert.Shard = shard
	cert.Seed = o.seed
	if target.KnownFindings != "" && !o.selfTest {
		// Findings the target's owner accepted stay listed, as accepted.
		known, err := certificate.LoadKnownFindings(target.KnownFindings)
		if err != nil {
			cert.Fail(err)
		} else {
			cert.Accept(known, time.Now())
		}
	}
	if o.selfTest {
		cert.Verdict = certificate.Certified
		if power == nil || power.Caught != power.Seeded || !allClean(power) {
			cert.Verdict = certificate.Failed
		}
	}
	for _, err := range []error{runErr, selfErr} {
		if err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("interrupted: %w", err)
			}
			cert.Fail(err)
		}
	}
	// The result (the table, the verdict, where the certificate is) goes to
	// stdout; progress went to stderr.
	if err := cert.WriteTable(stdout); err != nil {
		fmt.Fprintf(stderr, "canary-run: %v\n", err)
	}
	if err := cert.Write(out, lookupEnv); err != nil {
		fmt.Fprintf(stderr, "canary-run: %v\n", err)
		return certificate.ExitFailed
	}
	fmt.Fprintf(stdout, "certificate: %s\n", filepath.Join(out, certificate.JSONFile))
	return certificate.ExitCode(cert.Verdict)
}

// stages are the run's stages and how long each took, for the console.
type stages []string

// time runs fn as stage name and notes its duration.
func (s *stages) time(name string, fn func() error) error {
	start := time.Now()
	err := fn()
	*s = append(*s, fmt.Sprintf("%s %.1fs", name, time.Since(start).Seconds()))
	return err
}

func (s stages) String() string { return strings.Join(s, ", ") }

// preflight runs the target's preflight check (the embedded agentd's: a
// tool sandbox works here) in the run's work tree and prints what it said.
// An error means nothing can be certified with this target here.
func preflight(ctx context.Context, out string, o certifyOptions, target harness.Target, stderr io.Writer) error {
	if len(target.Preflight) == 0 {
		return nil
	}
	_, err := runWork(ctx, out, o, stderr, func(work string) (struct{}, error) {
		text, err := harness.Preflight(ctx, target, filepath.Join(work, "preflight"))
		if err == nil {
			fmt.Fprintf(stderr, "canary-run: preflight of %s passed:\n%s\n", target.Name, text)
		}
		return struct{}{}, err
	})
	return err
}

// runWork runs fn in a work tree: DIR/work when kept, else a temporary
// folder removed afterwards.
func runWork[T any](ctx context.Context, out string, o certifyOptions, stderr io.Writer, fn func(work string) (T, error)) (T, error) {
	var zero T
	var work string
	if o.keep {
		work = filepath.Join(out, "work")
		if err := os.MkdirAll(work, 0o755); err != nil {
			return zero, fmt.Errorf("make the work tree: %w", err)
		}
		fmt.Fprintf(stderr, "canary-run: keeping the work tree in %s\n", work)
	} else {
		var err error
		if work, err = os.MkdirTemp("", "canary-run-"); err != nil {
			return zero, fmt.Errorf("make the work tree: %w", err)
		}
		defer os.RemoveAll(work)
	}
	return fn(work)
}

func catalogConfig(o certifyOptions, target harness.Target, work string, stderr io.Writer) scenarios.Config {
	return scenarios.Config{
		Target:   target,
		Tenants:  o.tenants,
		Run:      o.run,
		WorkDir:  work,
		Keep:     o.keep,
		Timeout:  o.timeout,
		Parallel: o.parallel,
		Progress: stderr,
		Seed:     o.seed,
	}
}

// selfTestTenants is how many tenants the self-test's scenarios run with:
// enough for a launch profile and two others.
const selfTestTenants = 3

// selfTest measures the harness's detection power: every seeded fault of
// the embedded agentd (whatever the target of the run) through the
// scenario that must catch it, and those scenarios clean. It prints the
// table and returns the result for the certificate; a self-test that does
// not pass is an error, since a harness that misses a seeded leak cannot
// certify anything.
//
// seededFaults is the faults it seeds: every one (scenarios.Faults). The
// command's own test narrows it, since the whole matrix runs once in the
// suite already (scenarios.TestSelfTestCatchesEverySeededFault).
var seededFaults = scenarios.Faults

func selfTest(ctx context.Context, out string, o certifyOptions, preflighted bool, clean []scenarios.Report, stdout, stderr io.Writer) (*certificate.DetectionPower, error) {
	target, _, err := loadTarget("agentd")
	if err != nil {
		return nil, err
	}
	if !preflighted {
		if err := preflight(ctx, out, o, target, stderr); err != nil {
			return nil, fmt.Errorf("self-test: %w", err)
		}
	}
	fmt.Fprintln(stderr, "canary-run: self-test: every seeded fault of the embedded agentd, and the same scenarios clean")
	res, err := runWork(ctx, out, o, stderr, func(work string) (scenarios.SelfTestResult, error) {
		cfg := catalogConfig(o, target, filepath.Join(work, "self-test"), stderr)
		cfg.Run, cfg.Tenants = "", selfTestTenants
		return scenarios.SelfTestWith(ctx, scenarios.Default(), cfg, seededFaults(), scenarios.SelfTestOptions{Clean: clean})
	})
	if len(res.Outcomes) == 0 {
		if err == nil {
			err = fmt.Errorf("self-test ran no fault")
		}
		return nil, err
	}
	if werr := scenarios.WriteSelfTestTable(stdout, res); werr != nil && err == nil {
		err = werr
	}
	power := &certificate.DetectionPower{Caught: res.Caught(), Seeded: len(res.Outcomes)}
	for _, oc := range res.Outcomes {
		power.Faults = append(power.Faults, certificate.FaultResult{
			Fault: oc.Fault, Scenario: oc.Scenario, Expected: string(oc.Expected),
			Caught: oc.Caught, Findings: oc.Findings, CleanRun: oc.Clean, Missed: missedWhy(oc), CleanWhy: oc.CleanWhy,
		})
	}
	if err == nil && !res.Passed() {
		fails := power.Failures()
		err = fmt.Errorf("self-test: the harness caught %d of %d seeded faults by their expected invariant, and %d clean runs were not clean: it cannot certify: %s",
			res.Caught(), len(res.Outcomes), uncleanRuns(res), strings.Join(fails, "; "))
	}
	return power, err
}

// reusable is the catalog's reports the self-test may take as its clean
// runs: those of a run against the embedded agentd with the self-test's
// tenants, the very runs it would make.
func reusable(o certifyOptions, reports []scenarios.Report) []scenarios.Report {
	if o.target != "agentd" || o.tenants != selfTestTenants {
		return nil
	}
	var out []scenarios.Report
	for _, r := range reports {
		if r.Result != scenarios.Skipped {
			out = append(out, r)
		}
	}
	return out
}

// missedWhy is why a fault was missed, "" when it was caught.
func missedWhy(o scenarios.FaultOutcome) string {
	if o.Caught {
		return ""
	}
	return o.Error
}

// uncleanRuns counts the scenarios whose clean run was not clean.
func uncleanRuns(r scenarios.SelfTestResult) int {
	n := 0
	for _, c := range r.Clean {
		if c.Result != scenarios.Pass {
			n++
		}
	}
	return n
}

func allClean(p *certificate.DetectionPower) bool {
	for _, f := range p.Faults {
		if !f.CleanRun {
			return false
		}
	}
	return true
}

// tenantsOf names the tenants each scenario runs with, for a run where no
// scenario got as far as building its own (whose tags are then unknown).
func tenantsOf(n int) []certificate.Tenant {
	out := make([]certificate.Tenant, 0, n)
	for _, name := range tenants.Names(n) {
		out = append(out, certificate.Tenant{Name: name, Launch: name == "default"})
	}
	return out
}
