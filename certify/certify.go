package certify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenantcanary/tenantcanary/certificate"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/scenarios"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Run certifies target from a Go test: the preflight, then every selected
// scenario as a sub-test of t named by its ID (so `go test -run
// 'TestCertify/tenant-authz'` runs one), each finding a test error that
// reads as canary-run's console line, an unmet need a skip with its
// reason; the target's known findings applied; the self-test when
// opts.SelfTest; the certificate written into opts.Out when set. It stops
// short of t's deadline (go test -timeout), leaving time to clean up.
// Under `go test -short` it runs ShortScenarios only. It returns the
// certificate (nil when the target or the options are bad: t has failed
// then).
func Run(t *testing.T, target harness.Target, opts Options) *certificate.Certificate {
	t.Helper()
	opts.Short = opts.Short || testing.Short()
	return RunT(testingT{t}, target, opts)
}

// RunT is Run for a T that is not a *testing.T; opts.Short says whether to
// run the short subset.
func RunT(t T, target harness.Target, opts Options) *certificate.Certificate {
	t.Helper()
	p, err := newPipeline(target, opts)
	if err != nil {
		t.Fatalf("certify: %v", err)
	}
	if len(p.sel.ids) == 0 && !p.opts.OnlySelfTest {
		t.Skipf("certify: no scenario selected (Run %q, Shard %q, short %v; the short subset is %s)",
			p.opts.Run, p.opts.Shard, p.opts.Short, strings.Join(shortScenarios, ", "))
	}
	ctx, cancel := untilDeadline(t)
	defer cancel()

	p.say = func(format string, args ...any) {
		if p.opts.Progress != nil {
			fmt.Fprintf(p.opts.Progress, p.opts.Name+": "+format+"\n", args...)
			return
		}
		t.Logf(p.opts.Name+": "+format, args...)
	}
	p.each = func(spec scenarios.Spec, run func(io.Writer) scenarios.Report) {
		t.Run(spec.ID, func(st T) {
			st.Helper()
			if ctx.Err() != nil {
				st.Skipf("%s: not run: %v", spec.ID, context.Cause(ctx))
			}
			progress := p.opts.Progress
			if progress == nil {
				progress = &logWriter{t: st}
			}
			p.judge(st, run(progress))
		})
	}
	p.stage = func(name string, fn func(w io.Writer) error) (err error) {
		ran := false
		t.Run(name, func(st T) {
			ran = true
			var table bytes.Buffer
			err = fn(&table)
			if table.Len() > 0 {
				st.Log("\n" + table.String())
			}
			if err != nil {
				st.Errorf("%v", err)
			}
		})
		if !ran {
			return errNotSelected
		}
		return err
	}
	cert := p.certify(ctx)
	if err := p.write(cert); err != nil {
		t.Errorf("certify: %v", err)
	}
	if cert.Verdict != certificate.Certified {
		var table bytes.Buffer
		_ = cert.WriteTable(&table)
		reach := ""
		if r := certificate.ReachOf(cert); r.Counted() > 0 {
			reach = "\nwho reached whom:\n" + r.Text()
		}
		if cert.Error != "" {
			t.Errorf("certify: %s: %s%s", cert.Headline(), cert.Error, reach)
		} else if !t.Failed() || reach != "" {
			t.Errorf("certify: %s%s", cert.Headline(), reach)
		}
		t.Log("\n" + table.String())
	}
	if p.opts.Out != "" {
		t.Logf("certify: %s: certificate in %s", cert.Verdict, filepath.Join(p.opts.Out, certificate.JSONFile))
	}
	return cert
}

// Certify is the whole certification outside `go test` (canary-run's main
// run): Run's work, with progress on opts.Progress and the self-test's
// table on opts.Results. A finding or a failure of the run is in the
// certificate (its Verdict, its Error), not in the error: the error says
// the target or the options are bad (ErrTarget, ErrOptions; the
// certificate is nil then) or the certificate could not be written.
func Certify(ctx context.Context, target harness.Target, opts Options) (*certificate.Certificate, error) {
	p, err := newPipeline(target, opts)
	if err != nil {
		return nil, err
	}
	p.say = func(format string, args ...any) {
		if p.opts.Progress != nil {
			fmt.Fprintf(p.opts.Progress, p.opts.Name+": "+format+"\n", args...)
		}
	}
	p.stage = func(_ string, fn func(w io.Writer) error) error {
		w := p.opts.Results
		if w == nil {
			w = io.Discard
		}
		return fn(w)
	}
	cert := p.certify(ctx)
	return cert, p.write(cert)
}

// errNotSelected: a stage's sub-test was not selected (go test -run).
var errNotSelected = errors.New("not selected")

// pipeline is one certification: its target, its options and where it
// reports.
type pipeline struct {
	target harness.Target
	opts   Options
	sel    selection
	known  []certificate.KnownFinding
	// knownErr is why the known findings could not be read: the run
	// fails with it.
	knownErr error

	say func(format string, args ...any)
	// each wraps a scenario's run (RunT: a sub-test); nil runs it as is.
	each func(spec scenarios.Spec, run func(io.Writer) scenarios.Report)
	// stage runs the self-test, writing its table to w.
	stage func(name string, fn func(w io.Writer) error) error
	// preflights are the preflight checks' outputs, by target name.
	preflights map[string]string
}

func newPipeline(target harness.Target, opts Options) (*pipeline, error) {
	t, err := checkTarget(target)
	if err != nil {
		return nil, err
	}
	if err := opts.check(); err != nil {
		return nil, err
	}
	p := &pipeline{target: t, opts: opts}
	if !opts.OnlySelfTest {
		if p.sel, err = opts.selectScenarios(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrOptions, err)
		}
		if t.KnownFindings != "" {
			p.known, p.knownErr = certificate.LoadKnownFindings(t.KnownFindings)
		}
	}
	if opts.Out != "" {
		out, err := filepath.Abs(opts.Out)
		if err == nil {
			err = os.MkdirAll(out, 0o755) // fail now, not after the whole catalog ran
		}
		if err != nil {
			return nil, fmt.Errorf("%w: Out %q: %w", ErrOptions, opts.Out, err)
		}
		p.opts.Out = out
	}
	if p.opts.LookupEnv == nil {
		p.opts.LookupEnv = os.LookupEnv
	}
	return p, nil
}

// certify runs the preflight, the catalog and the self-test, and concludes.
func (p *pipeline) certify(ctx context.Context) *certificate.Certificate {
	o := &p.opts
	selfTest := o.SelfTest || o.OnlySelfTest
	if sh := p.sel.shard; sh != nil {
		if sh.K > 1 {
			selfTest = false // shard 1 measures the detection power for all
		}
		p.say("shard %d/%d: %s", sh.K, sh.N, strings.Join(p.sel.ids, ", "))
	}
	if o.Seed == 0 {
		o.Seed = scenarios.DrawSeed()
	}
	p.say("seed %d (replay with --seed %d)", o.Seed, o.Seed)
	start := time.Now()
	var reports []scenarios.Report
	var runErr error
	var st stages
	if !o.OnlySelfTest {
		runErr = st.time("preflight", func() error { return p.preflight(ctx, p.target) })
		if runErr == nil {
			runErr = st.time("catalog", func() (err error) {
				reports, err = withWork(p, func(work string) ([]scenarios.Report, error) {
					return scenarios.RunCatalogWith(ctx, scenarios.Default(), p.config(p.target),
						scenarios.CatalogOptions{Run: p.sel.run, WorkDir: work, Keep: o.Keep, Parallel: o.Parallel, Each: p.each})
				})
				return err
			})
		}
	}
	var power *certificate.DetectionPower
	var selfErr error
	if selfTest && runErr == nil {
		err := st.time("self-test", func() error {
			return p.stage("self-test", func(w io.Writer) (err error) {
				power, err = p.selfTest(ctx, reports, w)
				return err
			})
		})
		if !errors.Is(err, errNotSelected) {
			selfErr = err
		}
	}
	p.say("stages: %s", st)
	ts := certificate.TenantsOf(reports)
	if len(ts) == 0 {
		ts = tenantsOf(o.Tenants)
	}
	cert := certificate.New(certTarget(p.target, o.Timeout), ts, reports, time.Since(start))
	cert.DetectionPower = power
	cert.Shard = p.sel.shard
	cert.Seed = o.Seed
	if p.target.KnownFindings != "" && !o.OnlySelfTest {
		// Findings the target's owner accepted stay listed, as accepted.
		if p.knownErr != nil {
			cert.Fail(p.knownErr)
		} else {
			cert.Accept(p.known, time.Now())
		}
	}
	if o.OnlySelfTest {
		cert.Verdict = certificate.Certified
		if power == nil || power.Caught != power.Seeded || !allClean(power) {
			cert.Verdict = certificate.Failed
		}
	}
	for _, err := range []error{runErr, selfErr} {
		if err != nil {
			if cause := context.Cause(ctx); errors.Is(cause, errDeadline) {
				err = fmt.Errorf("%w: %w", cause, err)
			} else if ctx.Err() != nil {
				err = fmt.Errorf("interrupted: %w", err)
			}
			cert.Fail(err)
		}
	}
	return cert
}

// write writes the certificate into Out, when set.
func (p *pipeline) write(cert *certificate.Certificate) error {
	if p.opts.Out == "" {
		return nil
	}
	return cert.Write(p.opts.Out, p.opts.LookupEnv)
}

// config is how each scenario of the run runs against target.
func (p *pipeline) config(target harness.Target) scenarios.Config {
	var progress io.Writer
	if p.each == nil {
		progress = p.opts.Progress
	}
	return scenarios.Config{Target: target, Tenants: p.opts.Tenants, Timeout: p.opts.Timeout, Progress: progress, Seed: p.opts.Seed}
}

// preflight runs target's preflight check (the embedded agentd's: a tool
// sandbox works here) in the run's work tree and says what it said. An
// error means nothing can be certified with this target here.
func (p *pipeline) preflight(ctx context.Context, target harness.Target) error {
	if len(target.Preflight) == 0 {
		return nil
	}
	_, err := withWork(p, func(work string) (struct{}, error) {
		text, err := harness.Preflight(ctx, target, filepath.Join(work, "preflight"))
		if err == nil {
			p.say("preflight of %s passed:\n%s", target.Name, text)
			if p.preflights == nil {
				p.preflights = map[string]string{}
			}
			p.preflights[target.Name] = text
		}
		return struct{}{}, err
	})
	return err
}

// withWork runs fn in a work tree: Out/work when kept (or a temporary
// folder it names, with no Out), else a temporary folder removed
// afterwards.
func withWork[R any](p *pipeline, fn func(work string) (R, error)) (R, error) {
	var zero R
	var work string
	switch {
	case p.opts.Keep && p.opts.Out != "":
		work = filepath.Join(p.opts.Out, "work")
		if err := os.MkdirAll(work, 0o755); err != nil {
			return zero, fmt.Errorf("make the work tree: %w", err)
		}
		p.say("keeping the work tree in %s", work)
	default:
		var err error
		if work, err = os.MkdirTemp("", "canary-run-"); err != nil {
			return zero, fmt.Errorf("make the work tree: %w", err)
		}
		if p.opts.Keep {
			p.say("keeping the work tree in %s", work)
		} else {
			defer os.RemoveAll(work)
		}
	}
	return fn(work)
}

// errDeadline is why a run under a test stops early: its deadline is near.
var errDeadline = errors.New("stopped before the test's deadline (go test -timeout), leaving time to clean up")

// untilDeadline is a context that ends short of t's deadline: a tenth of
// the time left (5 s to a minute) is left for the cleanup.
func untilDeadline(t T) (context.Context, context.CancelFunc) {
	d, ok := t.Deadline()
	if !ok {
		return context.WithCancel(context.Background())
	}
	grace := min(max(time.Until(d)/10, 5*time.Second), time.Minute)
	return context.WithDeadlineCause(context.Background(), d.Add(-grace), errDeadline)
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

// tenantsOf names the tenants each scenario runs with, for a run where no
// scenario got as far as building its own (whose tags are then unknown).
func tenantsOf(n int) []certificate.Tenant {
	out := make([]certificate.Tenant, 0, n)
	for _, name := range tenants.Names(n) {
		out = append(out, certificate.Tenant{Name: name, Launch: name == "default"})
	}
	return out
}
