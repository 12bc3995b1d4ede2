package certify

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/certificate"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/scenarios"
)

// Options shape a certification. The zero value runs every scenario (the
// short subset under -short) with 3 tenants, scenarios.AutoParallel() at a
// time, with a seed drawn for the run, no self-test, and writes nothing.
type Options struct {
	// Out, when set, is the folder certificate.json, junit.xml and
	// summary.md are written into (made when missing); summary.md is also
	// appended to $GITHUB_STEP_SUMMARY when LookupEnv says it is set.
	Out string
	// Tenants is how many tenants each scenario runs with: MinTenants to
	// MaxTenants; 0 means 3.
	Tenants int
	// Run selects scenarios by ID (a regexp); "" selects them all.
	Run string
	// Shard runs only slice "K/N" of the selection (SelectShard); shard 1
	// alone runs the self-test, when asked.
	Shard string
	// Short runs only the short subset (ShortScenarios) of the selection.
	// Run sets it under `go test -short`.
	Short bool
	// Parallel is how many scenarios run at once; 0 means
	// scenarios.AutoParallel(). A scenario that measures latency
	// (noisy-neighbour) always runs alone.
	Parallel int
	// Timeout, when set, is each scenario's timeout in place of its own.
	Timeout time.Duration
	// Seed replays a run's tenant orders and interleavings (it is in the
	// certificate); 0 draws one.
	Seed uint64
	// Keep keeps the work tree (sandboxes, homes, logs) under Out/work,
	// or in a temporary folder it names when Out is empty.
	Keep bool

	// SelfTest also measures the harness's detection power after the
	// catalog: every seeded fault (AGENTD_FAULTS) of the embedded agentd
	// caught by its scenario, and those scenarios clean. Only the embedded
	// agentd seeds faults: the self-test runs against SelfTestTarget, or
	// the target itself when that is nil (then it must be agentd, e.g.
	// harness.AgentdTarget(certify.Command("agentd")...) in a test binary
	// whose Main runs agentd's cli.Main as "agentd").
	SelfTest bool
	// OnlySelfTest runs the self-test alone (canary-run --self-test): the
	// verdict is certified when it caught every fault and every clean run
	// was clean.
	OnlySelfTest bool
	// SelfTestTarget is the embedded agentd the self-test seeds faults
	// into; nil: the target.
	SelfTestTarget *harness.Target
	// Faults are the faults the self-test seeds; nil: scenarios.Faults().
	Faults []scenarios.Fault

	// Progress receives progress lines: each scenario's phases, and the
	// run's own (seed, preflight, stages). Nil: under Run and RunT, each
	// scenario's lines go to its sub-test's log and the run's to t's;
	// under Certify, nowhere.
	Progress io.Writer
	// Results receives the self-test's table (under Certify; RunT logs it
	// in the self-test's sub-test).
	Results io.Writer
	// Name starts the run's own progress lines ("canary-run: seed ...");
	// default "certify".
	Name string
	// LookupEnv finds $GITHUB_STEP_SUMMARY when the certificate is
	// written; nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
}

// Limits of Options.Tenants.
const (
	MinTenants = 2 // isolation needs someone to be isolated from
	MaxTenants = 100
)

// selfTestTenants is how many tenants the self-test's scenarios run with:
// enough for a launch profile and two others.
const selfTestTenants = 3

// shortScenarios is the -short subset: the scenarios that need no tool
// sandbox and no plugin, and take a few seconds each on a 2-core machine
// (pooled-serve 3 to 5 s, the others 1 to 3 s): the pooled server's
// isolation, its authorisation, its write scope and concurrent turns.
var shortScenarios = []string{"pooled-serve", "tenant-authz", "settings-writes", "concurrent-turns"}

// ShortScenarios lists the scenarios a short run (Options.Short, `go test
// -short`) makes: pooled-serve, tenant-authz,
// settings-writes and concurrent-turns, each a few seconds.
func ShortScenarios() []string { return slices.Clone(shortScenarios) }

// ErrOptions marks options that cannot run.
var ErrOptions = errors.New("bad options")

// check validates o and fills its defaults.
func (o *Options) check() error {
	var errs []error
	if o.Tenants == 0 {
		o.Tenants = 3
	}
	if o.Tenants < MinTenants || o.Tenants > MaxTenants {
		errs = append(errs, fmt.Errorf("Tenants %d: want %d to %d", o.Tenants, MinTenants, MaxTenants))
	}
	if o.Parallel < 0 {
		errs = append(errs, fmt.Errorf("Parallel %d: want 0 (automatic) or more", o.Parallel))
	}
	if o.Parallel == 0 {
		o.Parallel = scenarios.AutoParallel()
	}
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("Timeout %v: want 0 or more", o.Timeout))
	}
	if o.OnlySelfTest && (o.Run != "" || o.Shard != "") {
		errs = append(errs, errors.New("OnlySelfTest runs the scenarios every fault needs: Run and Shard do not apply"))
	}
	if o.Name == "" {
		o.Name = "certify"
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrOptions, err)
	}
	return nil
}

// selection is the scenarios a run makes: a regexp selecting exactly them,
// their IDs, and the shard it is.
type selection struct {
	run   string
	ids   []string
	shard *certificate.Shard
}

// selectScenarios is what o selects from the catalog: Run, then Shard,
// then Short.
func (o Options) selectScenarios() (selection, error) {
	cat := scenarios.Default()
	var sel selection
	if o.Shard != "" {
		sh, err := SelectShard(o.Run, o.Shard)
		if err != nil {
			return sel, err
		}
		sel.ids, sel.shard = sh.IDs, &sh.Shard
	} else {
		specs := cat.All()
		if o.Run != "" {
			var err error
			if specs, err = cat.Match(o.Run); err != nil {
				return sel, err
			}
		}
		for _, s := range specs {
			sel.ids = append(sel.ids, s.ID)
		}
	}
	if o.Short {
		sel.ids = slices.DeleteFunc(sel.ids, func(id string) bool { return !slices.Contains(shortScenarios, id) })
	}
	sel.run = exactly(sel.ids)
	return sel, nil
}

// exactly is a regexp matching exactly ids.
func exactly(ids []string) string {
	quoted := make([]string, len(ids))
	for i, id := range ids {
		quoted[i] = regexp.QuoteMeta(id)
	}
	return "^(?:" + strings.Join(quoted, "|") + ")$"
}

// ShardSelection is the slice of the catalog one shard runs.
type ShardSelection struct {
	certificate.Shard
	IDs []string // its scenarios, in catalog order
	Run string   // a regexp selecting exactly IDs
}

// SelectShard picks shard "K/N" of the scenarios run selects ("" = all):
// the scenarios at positions K-1, K-1+N, K-1+2N, ... in catalog order. The
// slices of 1/N..N/N are disjoint, cover the selection and depend on
// nothing but the catalog, so N machines can run them side by side
// (certificate.Merge joins their certificates).
func SelectShard(run, spec string) (ShardSelection, error) {
	k, n, err := parseShard(spec)
	if err != nil {
		return ShardSelection{}, err
	}
	cat := scenarios.Default()
	specs := cat.All()
	if run != "" {
		if specs, err = cat.Match(run); err != nil {
			return ShardSelection{}, err
		}
	}
	if n > len(specs) {
		return ShardSelection{}, fmt.Errorf("--shard %s: the selection has %d scenarios, fewer than %d shards", spec, len(specs), n)
	}
	sel := ShardSelection{Shard: certificate.Shard{K: k, N: n, Run: run}}
	for i := k - 1; i < len(specs); i += n {
		sel.IDs = append(sel.IDs, specs[i].ID)
	}
	sel.Run = exactly(sel.IDs)
	return sel, nil
}

func parseShard(spec string) (k, n int, err error) {
	ks, ns, ok := strings.Cut(spec, "/")
	k, kerr := strconv.Atoi(ks)
	n, nerr := strconv.Atoi(ns)
	if !ok || kerr != nil || nerr != nil || n < 1 || k < 1 || k > n {
		return 0, 0, fmt.Errorf("--shard %q: want K/N with 1 <= K <= N, e.g. 2/3", spec)
	}
	return k, n, nil
}
