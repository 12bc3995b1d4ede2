package surface

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// v0141Classes are the classes of issue 46 that agentd v0.14.1 fell to, each
// with the scenario, phase (any when "") and invariant whose finding shows
// it in a certificate.
var v0141Classes = []struct {
	class, scenario, phase, invariant string
}{
	{"environment into unsandboxed processes", "surface", "", "unsandboxed_env"},
	{"credentials revoked under a live connection", "credential-revocation", "", "revoked_credential"},
	{"files the server reads, replaced by special or huge ones", "surface", "attack-files", "resource_harm"},
	{"pooled by default where the operator said nothing", "entry-points", "stdio-serves-another", "plugin_boundary"},
	{"a command the harness never ran (cron tick)", "entry-points", "cron-tick", "plugin_boundary"},
}

// TestClassesOnAgentdV0141 reads the certificate of the surface family
// against agentd v0.14.1 (examples/targets/agentd-v0.14.1/ci.sh sets
// AGENTD_V0141_CERT) and wants findings of at least five of issue 46's
// seven classes: the family's real-world positive control.
func TestClassesOnAgentdV0141(t *testing.T) {
	path := os.Getenv("AGENTD_V0141_CERT")
	if path == "" {
		t.Skip("AGENTD_V0141_CERT is unset: examples/targets/agentd-v0.14.1/ci.sh sets it")
	}
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var cert struct {
		Scenarios []struct {
			ID     string `json:"id"`
			Phases []struct {
				Name     string `json:"name"`
				Findings []struct {
					Invariant string `json:"invariant"`
				} `json:"findings"`
			} `json:"phases"`
		} `json:"scenarios"`
	}
	require.NoError(t, json.Unmarshal(data, &cert), path)
	found := 0
	for _, c := range v0141Classes {
		seen := false
		for _, s := range cert.Scenarios {
			for _, p := range s.Phases {
				for _, f := range p.Findings {
					seen = seen || (s.ID == c.scenario && (c.phase == "" || p.Name == c.phase) && f.Invariant == c.invariant)
				}
			}
		}
		t.Logf("%-60s %v", c.class, seen)
		if seen {
			found++
		}
	}
	assert.GreaterOrEqual(t, found, 5, "agentd v0.14.1: want findings of at least five of issue 46's seven classes")
}
