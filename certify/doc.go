// Package certify certifies a pooled multi-tenant server from a Go test:
// no tenant's data reaches another. It owns the whole certification that
// canary-run runs (the target's preflight, the scenario catalog, the
// target's known findings, the self-test, the certificate and its
// verdict), and canary-run is a thin command line on it.
//
// A team whose server is written in Go certifies it in its own _test.go,
// with nothing installed: the test binary re-executes itself as the
// server (Command), and TestMain runs the server when it is re-executed
// (Main):
//
//	func TestMain(m *testing.M) {
//		os.Exit(certify.Main(m, map[string]func() int{"myserver": myserver.Main}))
//	}
//
//	func TestCertify(t *testing.T) {
//		target, err := certify.LoadTarget("testdata/target.yaml") // or a harness.Target literal
//		if err != nil {
//			t.Fatal(err)
//		}
//		target.Serve = certify.Command("myserver", "serve", "--port", "0")
//		certify.Run(t, target, certify.Options{Out: os.Getenv("CERT_OUT")})
//	}
//
// Run makes every scenario a sub-test named by its ID (`go test -run
// 'TestCertify/tenant-authz'` runs one) and reports each finding as a test
// error that reads as canary-run's console line:
//
//	pooled-serve/interleaved-turns: request: alpha provider of alpha: carries beta's provider_key
//
// A scenario whose need the target does not meet (a restart, its files,
// plugins) is skipped with the reason. `go test -short` runs
// ShortScenarios, a few seconds each. The run stops short of the test's
// deadline (go test -timeout), leaving time to clean up. Options.Out
// writes certificate.json, junit.xml and summary.md; Run returns the
// certificate either way.
//
// Options.SelfTest measures the harness's detection power by seeding the
// embedded agentd's faults: it is meaningful only against agentd (the
// target, or Options.SelfTestTarget).
//
// RunT is Run for callers outside `go test` (any T), and Certify runs the
// same certification with no T at all, as canary-run does.
package certify
