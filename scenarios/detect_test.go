package scenarios

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// stdioSessions starts a stdio backend per tenant, opens each tenant's
// session and runs rounds interleaved turns: where a planted spec starts.
func (e *Env) stdioSessions(rounds int) {
	e.T.Helper()
	e.StdioPerTenant()
	e.OpenSessions()
	e.InterleavedTurns(rounds)
}

// A leak planted by hand in the middle of a real run must fail the
// scenario as a leak, through the same path the catalog takes: the runner
// never passes by seeing nothing.
func TestPlantedLeaksAreCaught(t *testing.T) {
	t.Parallel()
	spec := Spec{
		ID: "planted", Purpose: "plants a foreign canary in a file and an RPC-visible place",
		Backends: []harness.Backend{harness.BackendStdio}, Snapshots: perTenant(1), Timeout: 2 * time.Minute,
		Phases: []Phase{
			{Name: "clean", Run: func(e *Env) {
				e.stdioSessions(1)
				// Positive control of the no-survivor check: the target's own
				// children (the sessions' shells) carry the run's marker, so a
				// shell that outlived agentd would be seen.
				direct := map[int]bool{}
				for _, p := range e.Box.Procs() {
					direct[p.Pid()] = true
				}
				var children int
				for _, pid := range e.Box.Survivors() {
					if !direct[pid] {
						children++
					}
				}
				assert.GreaterOrEqual(e.T, children, len(e.Tenants), "every session's shell carries the run marker")
			}},
			{Name: "plant", Run: func(e *Env) {
				alpha, beta := e.Tenant("alpha"), e.Tenant("beta")
				// beta's key lands in alpha's memory file, base64-encoded by
				// no one: the scanner must see it raw.
				f := filepath.Join(alpha.Home, "memories", "leaked.md")
				require.NoError(e.T, os.WriteFile(f, []byte("note: "+beta.ProviderKey()+"\n"), 0o644))
			}},
		},
	}
	cat, err := NewCatalog(spec)
	require.NoError(t, err)
	reps, err := RunCatalog(context.Background(), cat, Config{Target: agentdTarget(), Tenants: 3, WorkDir: t.TempDir()})
	require.NoError(t, err)
	require.Len(t, reps, 1)
	rep := reps[0]
	assert.Equal(t, Leak, rep.Result)
	require.Len(t, rep.Phases, 2)
	assert.Empty(t, rep.Phases[0].Findings, "the clean phase is clean")
	var hit *invariants.Finding
	for _, f := range rep.Phases[1].Findings {
		if f.Invariant == invariants.File && f.Owner == "beta" && f.Kind == tenants.ProviderKey {
			hit = &f
		}
	}
	require.NotNil(t, hit, "findings: %v", rep.Phases[1].Findings)
	assert.Equal(t, "alpha", hit.Tenant)
	assert.Contains(t, hit.Where.Path, "leaked.md")
	// Positive controls held in the clean phase.
	var passed int
	for _, c := range rep.Phases[0].Controls {
		assert.True(t, c.Passed, "%+v", c)
		passed++
	}
	assert.GreaterOrEqual(t, passed, 3*4)
}
