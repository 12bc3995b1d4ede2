package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/certificate"
	"github.com/tenantcanary/tenantcanary/certify"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
)

// TestSameSeedSameCertificateFromCLIAndAPI: canary-run --seed N and
// certify.Run with Options.Seed N (the same embedded agentd) make the same
// certificate: the same scenarios in the same order, the same seed in the
// certificate and in every report, the same tenants, the same verdict.
func TestSameSeedSameCertificateFromCLIAndAPI(t *testing.T) {
	t.Parallel()
	const run = "^(stdio-separate|shell-reuse)$"
	out := filepath.Join(t.TempDir(), "cli")
	var stdout, stderr syncio.Buffer
	code := dispatch(t.Context(), []string{"--seed", "4242", "--run", run, "--tenants", "2", "--out", out, "--no-self-test"},
		strings.NewReader(""), &stdout, &stderr, noEnv)
	require.Equal(t, 0, code, "stderr:\n%s", &stderr)
	cli := readCertificate(t, out)

	var api *certificate.Certificate
	t.Run("api", func(t *testing.T) {
		api = certify.Run(t, embeddedAgentd(), certify.Options{Seed: 4242, Run: run, Tenants: 2, LookupEnv: noEnv})
	})
	require.NotNil(t, api)
	require.Equal(t, cli.Seed, api.Seed)
	require.Equal(t, uint64(4242), api.Seed)
	require.Equal(t, cli.Verdict, api.Verdict)
	require.Equal(t, cli.Target, api.Target)
	require.Len(t, api.Scenarios, len(cli.Scenarios))
	for i := range cli.Scenarios {
		c, a := cli.Scenarios[i], api.Scenarios[i]
		require.Equal(t, c.ID, a.ID, "scenario %d", i)
		require.Equal(t, c.Seed, a.Seed, c.ID)
		require.Equal(t, c.Result, a.Result, c.ID)
		require.Len(t, a.Roster, len(c.Roster), c.ID)
		for j := range c.Roster {
			require.Equal(t, c.Roster[j].Name, a.Roster[j].Name, c.ID)
		}
	}
	names := func(ts []certificate.Tenant) (out []string) {
		for _, tn := range ts {
			out = append(out, tn.Name)
		}
		return out
	}
	require.Equal(t, names(cli.Tenants), names(api.Tenants))
}
