package certify_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/certificate"
	"github.com/tenantcanary/tenantcanary/certify"
	"github.com/tenantcanary/tenantcanary/scenarios"
)

// TestRunEmbeddedAgentd certifies this test binary re-executed as agentd
// (certify.Main, certify.Command) on one scenario: a sub-test of its own
// that passes, the certificate returned and written.
func TestRunEmbeddedAgentd(t *testing.T) {
	out := filepath.Join(t.TempDir(), "cert")
	var cert *certificate.Certificate
	t.Run("certify", func(t *testing.T) {
		cert = certify.Run(t, agentdTarget(), certify.Options{Run: "^stdio-separate$", Tenants: 2, Out: out, Seed: 42, LookupEnv: noEnv})
	})
	require.NotNil(t, cert)
	require.Equal(t, certificate.Certified, cert.Verdict, "error: %s", cert.Error)
	require.Equal(t, uint64(42), cert.Seed)
	require.Len(t, cert.Scenarios, 1)
	require.Equal(t, "stdio-separate", cert.Scenarios[0].ID)
	require.Equal(t, scenarios.Pass, cert.Scenarios[0].Result)
	for _, f := range []string{certificate.JSONFile, certificate.JUnitFile, certificate.MarkdownFile} {
		require.FileExists(t, filepath.Join(out, f))
	}
	_ = os.Getenv
}
