package certify_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/certificate"
	"github.com/tenantcanary/tenantcanary/certify"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
	"github.com/tenantcanary/tenantcanary/scenarios"
)

// recT is a certify.T that records what a run reports to it, as `go test`
// would show it: each sub-test's errors, logs and skip.
type recT struct {
	name     string
	deadline time.Time
	parent   *recT

	mu      sync.Mutex
	failed  bool
	skipped string
	errors  []string
	logs    []string
	subs    []*recT
}

func (r *recT) Helper()         {}
func (r *recT) Log(args ...any) { r.Logf("%s", fmt.Sprint(args...)) }
func (r *recT) Logf(f string, a ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, fmt.Sprintf(f, a...))
}
func (r *recT) Errorf(f string, a ...any) {
	r.mu.Lock()
	r.errors = append(r.errors, fmt.Sprintf(f, a...))
	r.mu.Unlock()
	r.fail()
}
func (r *recT) fail() {
	r.mu.Lock()
	r.failed = true
	r.mu.Unlock()
	if r.parent != nil {
		r.parent.fail()
	}
}
func (r *recT) Fatalf(f string, a ...any) { r.Errorf(f, a...); runtime.Goexit() }
func (r *recT) Skipf(f string, a ...any) {
	r.mu.Lock()
	r.skipped = fmt.Sprintf(f, a...)
	r.mu.Unlock()
	runtime.Goexit()
}
func (r *recT) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}
func (r *recT) Deadline() (time.Time, bool) { return r.deadline, !r.deadline.IsZero() }
func (r *recT) Run(name string, f func(certify.T)) bool {
	sub := &recT{name: name, deadline: r.deadline, parent: r}
	r.mu.Lock()
	r.subs = append(r.subs, sub)
	r.mu.Unlock()
	run(sub, func() { f(sub) })
	return !sub.Failed()
}

// sub is the sub-test named name.
func (r *recT) sub(name string) *recT {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.subs {
		if s.name == name {
			return s
		}
	}
	return nil
}

// run runs f in a goroutine of its own, as a test runs, and waits for it
// (a Fatalf or Skipf ends it).
func run(r *recT, f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

// runT runs certify.RunT on a recT and returns both.
func runT(target harness.Target, opts certify.Options) (*recT, *certificate.Certificate) {
	r := &recT{name: "TestCertify", deadline: time.Now().Add(10 * time.Minute)}
	var cert *certificate.Certificate
	run(r, func() { cert = certify.RunT(r, target, opts) })
	return r, cert
}

// withFault is the embedded agentd with fault seeded.
func withFault(fault string) harness.Target {
	t := agentdTarget()
	env := map[string]string{}
	for k, v := range t.Env {
		env[k] = v
	}
	for k, v := range scenarios.FaultEnv(fault) {
		env[k] = v
	}
	t.Env = env
	return t
}

// TestAFindingIsATestError: a leaking target (the embedded agentd sharing
// one provider key between profiles) fails the scenario's sub-test with
// one error per finding, each the console's line for it; the certificate
// says leaks. With a known-findings file accepting them, the same run
// passes and lists them as accepted.
func TestAFindingIsATestError(t *testing.T) {
	t.Parallel()
	target := withFault("shared-credential")
	r, cert := runT(target, certify.Options{Run: "^pooled-serve$", Seed: 7, LookupEnv: noEnv})
	require.NotNil(t, cert)
	require.Equal(t, certificate.Leaks, cert.Verdict, "error: %s", cert.Error)
	sub := r.sub("pooled-serve")
	require.NotNil(t, sub, "the scenario ran as a sub-test")
	require.True(t, sub.Failed())
	require.True(t, r.Failed(), "a failed sub-test fails the certification")
	var want []string
	for _, p := range cert.Scenarios[0].Phases {
		for _, f := range p.Findings {
			want = append(want, scenarios.FindingLine("pooled-serve", p.Name, f))
		}
	}
	require.NotEmpty(t, want)
	for _, w := range want {
		require.Contains(t, sub.errors, w, "each finding is an error reading as its console line")
	}
	require.Contains(t, strings.Join(sub.errors, "\n"), "request: ", "the invariant names the line")
	// The first error is the picture: whose data reached whom.
	require.Contains(t, sub.errors[0], "pooled-serve: who reached whom:", "the scenario's errors open with the matrix")
	require.Contains(t, sub.errors[0], certificate.ReachOf(cert).Text())
	require.Contains(t, r.errors[len(r.errors)-1], "who reached whom", "the run's failure opens with the matrix too")

	// The same findings accepted by the target's known findings.
	dir := t.TempDir()
	known := filepath.Join(dir, "known.yaml")
	require.NoError(t, os.WriteFile(known, []byte("- invariant: request\n  place: '.*'\n  reason: the test's own leak\n  expires: 2999-01-01\n"), 0o644))
	target.KnownFindings = known
	r, cert = runT(target, certify.Options{Run: "^pooled-serve$", Seed: 7, LookupEnv: noEnv})
	require.NotNil(t, cert)
	require.Positive(t, cert.AcceptedCount(), "the request findings are listed as accepted")
	for _, a := range cert.Accepted {
		require.Equal(t, "request", string(a.Finding.Invariant))
	}
	sub = r.sub("pooled-serve")
	require.Contains(t, strings.Join(sub.logs, "\n"), "known pooled-serve/", "an accepted finding is logged as known")
	for _, e := range sub.errors {
		require.NotContains(t, e, ": request: ", "an accepted finding is no error")
	}
	if len(cert.Scenarios[0].Findings()) == 0 {
		// The fault showed as request findings alone: all accepted.
		require.Equal(t, certificate.Certified, cert.Verdict)
		require.False(t, r.Failed(), "errors: %q", sub.errors)
	}
}

// TestABadTargetFailsNamingWhatIsWrong: a target literal is validated as
// LoadTarget validates a file; a bad one ends the run at once with what
// is wrong, and bad options too.
func TestABadTargetFailsNamingWhatIsWrong(t *testing.T) {
	t.Parallel()
	r, cert := runT(harness.Target{Name: "mine"}, certify.Options{})
	require.Nil(t, cert)
	require.True(t, r.Failed())
	require.Len(t, r.errors, 1)
	require.Contains(t, r.errors[0], "bad target mine: no backend: give stdio, serve, gateway, url or gateway_url")
	require.Empty(t, r.subs, "nothing ran")

	r, cert = runT(agentdTarget(), certify.Options{Tenants: 1, Parallel: -1})
	require.Nil(t, cert)
	require.Contains(t, strings.Join(r.errors, "\n"), "Tenants 1: want 2 to 100")
	require.Contains(t, strings.Join(r.errors, "\n"), "Parallel -1")

	_, err := certify.LoadTarget(filepath.Join(t.TempDir(), "missing.yaml"))
	require.ErrorContains(t, err, "load target: open ")
}

// TestAnUnmetNeedIsASkip: a scenario whose need the target does not meet
// (files: a target that gives no way to read its homes) is a skipped
// sub-test with the reason.
func TestAnUnmetNeedIsASkip(t *testing.T) {
	t.Parallel()
	target := agentdTarget()
	target.Files = false
	r, cert := runT(target, certify.Options{Run: "^profile-lifecycle$", LookupEnv: noEnv})
	require.NotNil(t, cert)
	sub := r.sub("profile-lifecycle")
	require.NotNil(t, sub)
	require.Contains(t, sub.skipped, "profile-lifecycle: ")
	require.False(t, sub.Failed())
	require.Equal(t, scenarios.Skipped, cert.Scenarios[0].Result)
}

// TestReexecutedNeverRunsTheTests: the test binary run with
// certify.CommandEnv naming a command it has not exits 2 saying so, and
// runs no test; naming one it has, it runs that command.
func TestReexecutedNeverRunsTheTests(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=.", "-test.v")
	cmd.Env = append(os.Environ(), certify.CommandEnv+"=nosuch")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	require.Equal(t, 2, exit.ExitCode())
	require.Contains(t, string(out), `TENANTCANARY_COMMAND="nosuch" names no command of this program (it has: agentd)`)
	require.NotContains(t, string(out), "=== RUN", "no test ran")

	argv := certify.Command("agentd", "version")
	require.Equal(t, []string{"/usr/bin/env", certify.CommandEnv + "=agentd", exe, "version"}, argv)
	out, err = exec.Command(argv[0], argv[1:]...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "agentd")
	require.NotContains(t, string(out), "=== RUN")
	require.NotContains(t, string(out), "PASS")
}

// TestTheDeadlineStopsTheRun: a run under a test whose deadline comes
// before the catalog could end stops short of it (leaving time to clean
// up), and the certificate says why.
func TestTheDeadlineStopsTheRun(t *testing.T) {
	t.Parallel()
	r := &recT{name: "TestCertify", deadline: time.Now().Add(10 * time.Second)}
	var cert *certificate.Certificate
	run(r, func() { cert = certify.RunT(r, agentdTarget(), certify.Options{Parallel: 2, LookupEnv: noEnv}) })
	require.NotNil(t, cert)
	var found []string
	for _, sc := range cert.Scenarios {
		for _, f := range sc.Findings() {
			found = append(found, sc.ID+": "+f.String())
		}
	}
	require.Equal(t, certificate.Failed, cert.Verdict, "a run the deadline stopped is failed, not judged; its findings: %q", found)
	require.Contains(t, cert.Error, "stopped before the test's deadline")
	require.True(t, r.Failed())
	require.Contains(t, strings.Join(r.errors, "\n"), "stopped before the test's deadline")
}

// TestSelfTestOfTheEmbeddedAgentd: Options.SelfTest against the embedded
// agentd seeds its faults (here one) after the catalog, in a sub-test of
// its own that logs the table; the catalog's clean run of the fault's
// scenario serves as the self-test's, and the certificate carries the
// detection power.
func TestSelfTestOfTheEmbeddedAgentd(t *testing.T) {
	t.Parallel()
	var faults []scenarios.Fault
	for _, f := range scenarios.Faults() {
		if f.Name == "model-bleed" {
			faults = append(faults, f)
		}
	}
	require.Len(t, faults, 1)
	var progress syncio.Buffer
	r, cert := runT(agentdTarget(), certify.Options{Run: "^pooled-serve$", SelfTest: true, Faults: faults, Progress: &progress, LookupEnv: noEnv})
	require.NotNil(t, cert)
	require.Equal(t, certificate.Certified, cert.Verdict, "error: %s; errors: %q", cert.Error, r.errors)
	require.NotNil(t, cert.DetectionPower)
	require.Equal(t, 1, cert.DetectionPower.Seeded)
	require.Equal(t, 1, cert.DetectionPower.Caught)
	st := r.sub("self-test")
	require.NotNil(t, st, "the self-test is a sub-test")
	require.Regexp(t, `model-bleed\s+pooled-serve\s+launch_bleed\s+caught`, strings.Join(st.logs, "\n"))
	require.Equal(t, 1, strings.Count(progress.String(), "pooled-serve         pass in"), "the catalog's run is the clean run:\n%s", progress.String())
}
