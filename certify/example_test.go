package certify_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/tenantcanary/tenantcanary/certify"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/scenarios"
)

// myserverMain stands for a server's main, returning its exit code.
func myserverMain() int { return 0 }

// A user's test: TestMain runs the test binary as the server when certify
// re-executes it, and TestCertify certifies it.
func Example() {
	testMain := func(m *testing.M) {
		os.Exit(certify.Main(m, map[string]func() int{"myserver": myserverMain}))
	}
	testCertify := func(t *testing.T) {
		target, err := certify.LoadTarget("testdata/target.yaml")
		if err != nil {
			t.Fatal(err)
		}
		target.Stdio = certify.Command("myserver", "stdio")
		cert := certify.Run(t, target, certify.Options{Out: os.Getenv("CERT_OUT")})
		t.Logf("verdict: %s", cert.Verdict)
	}
	_, _ = testMain, testCertify
}

// A target written in Go, validated as a target file is.
func ExampleRun_targetLiteral() {
	testCertify := func(t *testing.T) {
		certify.Run(t, harness.Target{
			Name:        "myserver",
			Files:       true,
			Stdio:       certify.Command("myserver", "stdio"),
			Serve:       certify.Command("myserver", "serve", "--host", "{host}", "--port", "0"),
			ProfileRoot: certify.Command("myserver", "root"),
			TokenVar:    "MYSERVER_TOKEN",
		}, certify.Options{Tenants: 4, Run: "^(pooled-serve|tenant-authz)$"})
	}
	_ = testCertify
}

// Command is env(1) setting the command's name, then this executable.
func ExampleCommand() {
	argv := certify.Command("myserver", "serve", "--port", "0")
	fmt.Println(argv[0], argv[1], argv[3:])
	// Output: /usr/bin/env TENANTCANARY_COMMAND=myserver [serve --port 0]
}

// A program that is not a test dispatches first thing in main.
func ExampleDispatch() {
	main := func() {
		certify.Dispatch(map[string]func() int{"myserver": myserverMain})
		// ... the program's own work: never reached when re-executed.
	}
	_ = main
}

// The scenarios `go test -short` runs.
func ExampleShortScenarios() {
	fmt.Println(certify.ShortScenarios())
	// Output: [pooled-serve tenant-authz settings-writes concurrent-turns]
}

// A finding, as a test error and as canary-run's console show it.
func ExampleRun_findingLine() {
	f := invariants.Finding{Invariant: invariants.Request, Tenant: "alpha", Owner: "beta", Kind: "provider_key",
		Where: invariants.Where{Label: "provider of alpha"}}
	fmt.Println(scenarios.FindingLine("pooled-serve", "interleaved-turns", f))
	// Output: pooled-serve/interleaved-turns: request: alpha provider of alpha: carries beta's provider_key
}

// Certify runs with no test at all, as canary-run does.
func ExampleCertify() {
	certifyStaging := func(ctx context.Context) error {
		target, err := certify.LoadTarget("staging.yaml")
		if err != nil {
			return err
		}
		cert, err := certify.Certify(ctx, target, certify.Options{Out: "canary-out", Progress: os.Stderr})
		if err != nil {
			return err
		}
		fmt.Println(cert.Headline())
		return nil
	}
	_ = certifyStaging
}
