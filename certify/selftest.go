package certify

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/tenantcanary/tenantcanary/certificate"
	"github.com/tenantcanary/tenantcanary/scenarios"
)

// selfTest measures the harness's detection power: every seeded fault of
// the embedded agentd (Options.SelfTestTarget, or the target) through the
// scenario that must catch it, and those scenarios clean. It writes the
// table to w and returns the result for the certificate; a self-test that
// does not pass is an error, since a harness that misses a seeded leak
// cannot certify anything. clean are the catalog's reports, taken as the
// clean runs when the catalog ran them against the same agentd with the
// self-test's tenants.
func (p *pipeline) selfTest(ctx context.Context, catalog []scenarios.Report, w io.Writer) (*certificate.DetectionPower, error) {
	target, same := p.target, p.opts.SelfTestTarget == nil
	if !same {
		var err error
		if target, err = checkTarget(*p.opts.SelfTestTarget); err != nil {
			return nil, fmt.Errorf("self-test: %w", err)
		}
	}
	// The catalog's preflight of the same target holds for the self-test.
	if !same || p.opts.OnlySelfTest {
		if err := p.preflight(ctx, target); err != nil {
			return nil, fmt.Errorf("self-test: %w", err)
		}
	}
	var clean []scenarios.Report
	if same && p.opts.Tenants == selfTestTenants {
		for _, r := range catalog {
			if r.Result != scenarios.Skipped {
				clean = append(clean, r)
			}
		}
	}
	faults := p.opts.Faults
	if faults == nil {
		faults = scenarios.Faults()
	}
	// A fault that takes away one tool sandbox's defence changes nothing
	// where the embedded agentd runs its tools under another: its own
	// preflight check says which.
	mode := toolSandboxOf(p.preflights[target.Name])
	faults, left := scenarios.SeededUnder(faults, mode)
	var unseeded []certificate.UnseededFault
	for _, f := range left {
		why := fmt.Sprintf("it takes away %s's defence, and agentd's tools run under %s on this machine", f.Sandbox(), mode)
		unseeded = append(unseeded, certificate.UnseededFault{Fault: f.Name, Why: why})
		p.say("self-test: %s is not seeded: %s", f.Name, why)
	}
	p.say("self-test: every seeded fault of the embedded agentd, and the same scenarios clean")
	res, err := withWork(p, func(work string) (scenarios.SelfTestResult, error) {
		cfg := p.config(target)
		cfg.Tenants = selfTestTenants
		cfg.Progress = p.opts.Progress
		return scenarios.SelfTestWith(ctx, scenarios.Default(), cfg, faults, scenarios.SelfTestOptions{Clean: clean,
			Catalog: scenarios.CatalogOptions{WorkDir: filepath.Join(work, "self-test"), Keep: p.opts.Keep, Parallel: p.opts.Parallel}})
	})
	if len(res.Outcomes) == 0 {
		if err == nil {
			err = fmt.Errorf("self-test ran no fault")
		}
		return nil, err
	}
	if werr := scenarios.WriteSelfTestTable(w, res); werr != nil && err == nil {
		err = werr
	}
	power := &certificate.DetectionPower{Caught: res.Caught(), Seeded: len(res.Outcomes), Unseeded: unseeded}
	for _, oc := range res.Outcomes {
		power.Faults = append(power.Faults, certificate.FaultResult{
			Fault: oc.Fault, Scenario: oc.Scenario, Expected: string(oc.Expected),
			Caught: oc.Caught, Findings: oc.Findings, CleanRun: oc.Clean, Missed: missedWhy(oc), CleanWhy: oc.CleanWhy,
		})
	}
	if err == nil && !res.Passed() {
		err = fmt.Errorf("self-test: the harness caught %d of %d seeded faults by their expected invariant, and %d clean runs were not clean: it cannot certify: %s",
			res.Caught(), len(res.Outcomes), uncleanRuns(res), strings.Join(power.Failures(), "; "))
	}
	return power, err
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

// launchSandbox is the line of agentd's sandbox check (its preflight) that
// says what the launch profile's tools run under; autoSandbox, what auto
// resolves to.
var (
	launchSandbox = regexp.MustCompile(`(?m)^the launch profile: terminal\.sandbox is .* -> (\w+)`)
	autoSandbox   = regexp.MustCompile(`(?m)^auto\s+-> (\w+)`)
)

// toolSandboxOf is the tool sandbox a preflight check's output says the
// target's tools run under ("bwrap", "landlock", "none"), or "" when it
// does not say (a target of another kind: every fault is seeded).
func toolSandboxOf(preflight string) string {
	for _, re := range []*regexp.Regexp{launchSandbox, autoSandbox} {
		if m := re.FindStringSubmatch(preflight); m != nil {
			return m[1]
		}
	}
	return ""
}
