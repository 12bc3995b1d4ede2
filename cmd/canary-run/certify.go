package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/agentd/cli"
	"github.com/tenantcanary/tenantcanary/agentd/server"
	"github.com/tenantcanary/tenantcanary/certificate"
	"github.com/tenantcanary/tenantcanary/certify"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/scenarios"
)

// runSynopsis is the main run's command line: the one source of its usage
// (runUsage, usageText; TestUsageListsEveryFlag checks it has every flag).
const runSynopsis = `canary-run [--target agentd|FILE] [--tenants N] [--run REGEXP] [--shard K/N] [--out DIR]
             [--keep] [--timeout D] [--parallel N] [--seed N] [--self-test | --no-self-test]
             [--faults REGEXP]`

// runUsage is the run's usage on one line, for its usage errors.
var runUsage = "usage: " + strings.Join(strings.Fields(runSynopsis), " ")

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
	faults   string // a regexp of the faults the self-test seeds
}

// errHelp: -h was asked for.
var errHelp = errors.New("help requested")

// parseFlags parses a command's args into fs: errHelp when -h was asked
// for, the flag package's error for a bad flag, else the error of an
// argument the command does not take (hint follows it), to report with the
// command's other usage errors.
func parseFlags(fs *flag.FlagSet, args []string, hint string) (errs []error, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected argument %q%s", fs.Arg(0), hint))
	}
	return errs, nil
}

// certifyFlags declares the run's flags.
func certifyFlags() (*flag.FlagSet, *certifyOptions) {
	o := &certifyOptions{}
	fs := flag.NewFlagSet("canary-run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.target, "target", "agentd", "the embedded `agentd`, agentd-cluster (the embedded agentd as 3 replicas over a Redis and a PostgreSQL the harness starts), or a target YAML FILE")
	fs.IntVar(&o.tenants, "tenants", 3, "tenants per scenario (2 to 100)")
	fs.StringVar(&o.run, "run", "", "run only the scenarios whose ID matches this `REGEXP`")
	fs.StringVar(&o.out, "out", "canary-out", "write the certificate into this `DIR`")
	fs.BoolVar(&o.keep, "keep", false, "keep the work tree (sandboxes, homes, logs, and each run's own log in its folder's run.log) under DIR/work for a look")
	fs.DurationVar(&o.timeout, "timeout", 0, "each scenario's timeout, shorter or longer than its own (0: each scenario's own)")
	fs.IntVar(&o.parallel, "parallel", 0, "scenarios run at once (0: twice the CPUs, 2 to 8; a scenario that measures latency always runs alone)")
	fs.BoolVar(&o.selfTest, "self-test", false, "only prove the harness catches every seeded leak of the embedded agentd (and that the same scenarios are clean); exit 0 when it does")
	fs.Uint64Var(&o.seed, "seed", 0, "replay a run's tenant orders and interleavings with its seed `N` (printed and in the certificate; 0 draws one)")
	fs.BoolVar(&o.noSelf, "no-self-test", false, "certify without measuring the harness's detection power (the certificate says it was not measured)")
	fs.StringVar(&o.faults, "faults", "", "seed only the faults whose name matches this `REGEXP` in the self-test (a quick re-run of a few; the detection power then counts only those)")
	fs.StringVar(&o.shard, "shard", "", "run only slice `K/N` of the selected scenarios (every Nth from the Kth, in catalog order); shard 1 also measures the detection power; join the shards' certificates with canary-run merge")
	return fs, o
}

func parseCertify(args []string) (certifyOptions, error) {
	fs, o := certifyFlags()
	errs, err := parseFlags(fs, args, " (a run takes only flags)")
	if err != nil {
		return *o, err
	}
	if o.target == "" {
		errs = append(errs, errors.New("--target is empty: give agentd or a target file"))
	}
	if o.tenants < certify.MinTenants || o.tenants > certify.MaxTenants {
		errs = append(errs, fmt.Errorf("--tenants %d: want %d to %d", o.tenants, certify.MinTenants, certify.MaxTenants))
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
	if o.faults != "" {
		if o.noSelf {
			errs = append(errs, errors.New("--faults picks the self-test's faults: --no-self-test runs none"))
		} else if _, err := selectFaults(o.seeded(), o.faults); err != nil {
			errs = append(errs, err)
		}
	}
	if o.shard != "" {
		if o.selfTest {
			errs = append(errs, errors.New("--self-test runs the whole fault matrix: --shard does not apply"))
		} else if _, err := certify.SelectShard(o.run, o.shard); err != nil {
			errs = append(errs, err)
		}
	}
	return *o, errors.Join(errs...)
}

// agentdCommand is the embedded agentd's name when this program re-executes
// itself as it (certify.Command, certify.Dispatch in main).
const agentdCommand = "agentd"

// agentdMain is the embedded agentd: this program re-executed with
// certify.CommandEnv=agentd, its arguments agentd's.
func agentdMain() int {
	// agentd handles its own signals, as the standalone binary does.
	return cli.Main(context.Background(), append([]string{"agentd"}, os.Args[1:]...), os.Stdin, os.Stdout, os.Stderr)
}

// embeddedAgentd is the default target: this program re-executed as agentd.
func embeddedAgentd() harness.Target {
	argv := certify.Command(agentdCommand)
	t := harness.AgentdTarget(argv[0], argv[1:]...)
	t.Version = server.Version
	return t
}

// agentdClusterTarget is the embedded agentd in cluster mode: its
// replicas over a PostgreSQL and a Redis the harness starts for every
// scenario (harness.AgentdClusterTarget), --target agentd-cluster.
const agentdClusterTarget = "agentd-cluster"

// embeddedAgentdCluster is the embedded agentd in cluster mode.
func embeddedAgentdCluster() harness.Target {
	t, _ := harness.AgentdClusterOf(embeddedAgentd())
	return t
}

// loadTarget is the embedded agentd, single or as a cluster, or a target
// file.
func loadTarget(name string) (harness.Target, error) {
	switch name {
	case "agentd":
		return embeddedAgentd(), nil
	case agentdClusterTarget:
		return embeddedAgentdCluster(), nil
	}
	return certify.LoadTarget(name)
}

// runCertify is the main run: the flags, certify.Certify, the table and
// the exit code.
func runCertify(ctx context.Context, args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	o, err := parseCertify(args)
	if errors.Is(err, errHelp) {
		printHelp(stdout)
		return 0
	}
	if err != nil {
		return usageError(stderr, "canary-run", err, runUsage)
	}
	target, err := loadTarget(o.target)
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
	cert, err := certify.Certify(ctx, target, o.options(out, stdout, stderr, lookupEnv))
	if cert == nil {
		return usageError(stderr, "canary-run", err, runUsage)
	}
	// The result (the table, the verdict, where the certificate is) goes to
	// stdout; progress went to stderr.
	if werr := cert.WriteTable(stdout); werr != nil {
		fmt.Fprintf(stderr, "canary-run: %v\n", werr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "canary-run: %v\n", err)
		return certificate.ExitFailed
	}
	fmt.Fprintf(stdout, "certificate: %s\n", filepath.Join(out, certificate.JSONFile))
	return certificate.ExitCode(cert.Verdict)
}

// seededFaults is the faults the self-test seeds: every one
// (scenarios.Faults). The command's own test narrows it, since the whole
// matrix runs once in the suite already
// (scenarios.TestSelfTestCatchesEverySeededFault).
var seededFaults = scenarios.Faults

// seeded is the faults this run's self-test seeds: seededFaults, and for
// agentd in cluster mode (--target agentd-cluster, whose user has the
// stores installed) agentd's cluster faults too (scenarios.ClusterFaults:
// the self-test runs each in agentd's cluster, scenarios.SelfTestTarget).
func (o certifyOptions) seeded() []scenarios.Fault {
	fs := seededFaults()
	if o.target == agentdClusterTarget {
		fs = append(fs, scenarios.ClusterFaults()...)
	}
	return fs
}

// options are the flags as certify's options: progress on stderr, the
// self-test's table on stdout, the certificate into out.
func (o certifyOptions) options(out string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) certify.Options {
	faults := o.seeded()
	if o.faults != "" {
		faults, _ = selectFaults(faults, o.faults) // parseCertify checked it
	}
	opts := certify.Options{
		Out: out, Tenants: o.tenants, Run: o.run, Shard: o.shard, Parallel: o.parallel, Timeout: o.timeout,
		Seed: o.seed, Keep: o.keep,
		SelfTest: !o.noSelf && !o.selfTest, OnlySelfTest: o.selfTest, Faults: faults,
		Progress: stderr, Results: stdout, Name: "canary-run", LookupEnv: lookupEnv,
	}
	if o.target != "agentd" {
		// The self-test seeds the embedded agentd's faults, whatever the
		// run's target.
		agentd := embeddedAgentd()
		opts.SelfTestTarget = &agentd
	}
	return opts
}

// selectFaults is the faults whose name matches expr; an error names the
// bad expression, or says that none matched and which there are.
func selectFaults(all []scenarios.Fault, expr string) ([]scenarios.Fault, error) {
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("--faults %q: %w", expr, err)
	}
	var out []scenarios.Fault
	var names []string
	for _, f := range all {
		names = append(names, f.Name)
		if re.MatchString(f.Name) {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--faults %q matches no fault (the faults: %s)", expr, strings.Join(names, " "))
	}
	return out, nil
}
