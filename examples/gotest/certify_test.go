// The certification of tinyagent, this module's pooled agent server, from
// its own `go test`: the test binary re-executes itself as the server, so
// nothing needs installing. `go test -short` runs the fast subset;
// CERT_OUT=dir keeps the certificate (certificate.json, junit.xml,
// summary.md); TINYAGENT_LEAK=shared-key turns the server's pooling bug on,
// and TestCertify goes red with the finding.
package gotest_test

import (
	"os"
	"testing"

	"github.com/tenantcanary/tenantcanary/certificate"
	"github.com/tenantcanary/tenantcanary/certify"
	"github.com/tenantcanary/tenantcanary/examples/gotest/server"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// TestMain runs tinyagent when certify.Command re-executes this binary,
// and the tests otherwise.
func TestMain(m *testing.M) {
	os.Exit(certify.Main(m, map[string]func() int{"tinyagent": server.Main}))
}

// tinyagent is the server as a target: where its homes live, its commands
// (this binary re-executed), the variable that hands it its token.
func tinyagent() harness.Target {
	return harness.Target{
		Name:        "tinyagent",
		Layout:      tenants.Layout{HomeVar: "TINYAGENT_HOME", LaunchDir: ".tinyagent", ProfilesDir: "profiles"},
		Stdio:       certify.Command("tinyagent", "stdio"),
		Serve:       certify.Command("tinyagent", "serve", "--host", "{host}", "--port", "0", "--cron-interval", "{cron_interval}"),
		ProfileRoot: certify.Command("tinyagent", "root"),
		TokenVar:    "TINYAGENT_TOKEN",
		Files:       true, // the harness writes the tenants' homes and scans them
		Env: map[string]string{
			// Where the tenants' workdirs are: <work root>/<profile>.
			"TINYAGENT_WORK_ROOT": "{root}/work",
			// The server's leak switch, from go test's environment (read
			// here, so a cached result never hides it).
			"TINYAGENT_LEAK": os.Getenv("TINYAGENT_LEAK"),
		},
		Dialect: harness.Dialect{Methods: map[string]harness.MethodSpec{
			"plugins.install": {Unsupported: "tinyagent loads no plugins"},
		}},
	}
}

func TestCertify(t *testing.T) {
	certify.Run(t, tinyagent(), certify.Options{Out: os.Getenv("CERT_OUT")})
}

// TestCertifyCatchesSharedKey is the positive control: with the pooling
// bug on, a named profile's provider gets the launch profile's key, and the
// certification must say so.
func TestCertifyCatchesSharedKey(t *testing.T) {
	target := tinyagent()
	target.Env["TINYAGENT_LEAK"] = "shared-key"
	cert, err := certify.Certify(t.Context(), target, certify.Options{Run: "^pooled-serve$"})
	if err != nil {
		t.Fatal(err)
	}
	if cert.Verdict != certificate.Leaks {
		t.Fatalf("verdict %s, want %s: %s", cert.Verdict, certificate.Leaks, cert.Headline())
	}
	for _, s := range cert.Scenarios {
		for _, ph := range s.Phases {
			for _, f := range ph.Findings {
				launch := tenants.LaunchProfile // the launch profile's tenant
				if f.Invariant == invariants.Request && f.Owner == launch && f.Tenant != launch {
					t.Logf("found: %s", f)
					return
				}
			}
		}
	}
	t.Fatalf("no request finding of the launch profile's key on another tenant's provider: %s", cert.Headline())
}
