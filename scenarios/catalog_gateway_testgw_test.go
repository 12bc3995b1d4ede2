package scenarios

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
)

var (
	testgwOnce sync.Once
	testgwBin  string
	testgwErr  error
)

// testgwTarget builds the test gateway (once) and loads its target file;
// leak, when set, is its TESTGW_LEAK.
func testgwTarget(t *testing.T, leak string) harness.Target {
	t.Helper()
	testgwOnce.Do(func() {
		testgwBin = filepath.Join(filepath.Dir(agentdBin), "testgw")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", "build", "-o", testgwBin, "./testdata/testgw").CombinedOutput()
		if err != nil {
			testgwErr = err
			testgwBin = string(out)
		}
	})
	require.NoError(t, testgwErr, "build testgw: %s", testgwBin)
	text, err := os.ReadFile(filepath.Join("testdata", "testgw", "target.yaml"))
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "testgw.yaml")
	require.NoError(t, os.WriteFile(path, []byte(strings.ReplaceAll(string(text), "BIN", testgwBin)), 0o644))
	tg, err := harness.LoadTarget(path)
	require.NoError(t, err)
	if leak != "" {
		tg = withEnv(tg, map[string]string{"TESTGW_LEAK": leak})
	}
	return tg
}

// TestGatewayFamilyOnTestgw certifies the clean test gateway: every
// scenario of the family passes with every control held, the shared
// store's included; the other scenarios are skipped as not applying.
func TestGatewayFamilyOnTestgw(t *testing.T) {
	t.Parallel()
	tg := testgwTarget(t, "")
	for _, id := range []string{"gateway-tenants", "gateway-failover", "gateway-routes"} {
		t.Run(id, func(t *testing.T) {
			t.Parallel()
			spec, err := Default().Get(id)
			require.NoError(t, err)
			names := passesWithControls(t, runOne(t, spec, tg))
			assert.True(t, names["own secret at rest in its declared place"], "store control ran: %v", names)
			assert.True(t, names["own key answered by own provider"], "%v", names)
			if id == "gateway-routes" {
				assert.True(t, names[`own route "own token" answers`], "%v", names)
				assert.True(t, names[`own row answers on route "own log row"`], "owner-only rows probed: %v", names)
				// The chains ran: after the owner's own write and after
				// every cross-tenant probe (a chain that stopped running
				// fails these controls).
				for _, c := range []string{
					`chain "move my made token to a group" then "models by my made key" answers after its own call`,
					`chain "move my made token to a group" then "models by my made key" answers after each cross-tenant probe`,
					`chain "set my webhook" then "test my webhook" answers after its own call`,
					`own route "make a token" captures made_key`,
				} {
					assert.True(t, names[c], "control %q ran: %v", c, names)
				}
			}
		})
	}
	spec, err := Default().Get("pooled-serve")
	require.NoError(t, err)
	assert.Contains(t, spec.unmet(tg), "kind: gateway")
}

// TestGatewayChecksCatchTestgwLeaks is the positive control of each
// check against the test gateway made to leak.
func TestGatewayChecksCatchTestgwLeaks(t *testing.T) {
	t.Parallel()
	cases := []struct {
		leak, scenario string
		want           invariants.Invariant
		detail         string
	}{
		{"token-route", "gateway-routes", invariants.Authz, "were not refused"},
		{"any-model", "gateway-tenants", invariants.Routing, "naming"},
		{"any-model", "gateway-tenants", invariants.Authz, "another tenant's model"},
		{"failover", "gateway-failover", invariants.Routing, "failed"},
		{"store-leak", "gateway-tenants", invariants.SharedStore, "outside its declared places"},
		{"store-leak", "gateway-tenants", invariants.SharedStore, "owns"},
	}
	for _, c := range cases {
		t.Run(c.leak+"/"+string(c.want)+"/"+strings.ReplaceAll(c.detail, " ", "-"), func(t *testing.T) {
			t.Parallel()
			spec, err := Default().Get(c.scenario)
			require.NoError(t, err)
			rep := runOne(t, spec, testgwTarget(t, c.leak))
			assert.Equal(t, Leak, rep.Result, "%v", rep.Log)
			assert.Contains(t, findingText(t, rep, c.want), c.detail)
		})
	}
}
