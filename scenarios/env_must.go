package scenarios

import (
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// The Env's one-line forms of the calls a phase cannot go on without:
// each fails the scenario itself, so a phase reads as a story with no
// "if err != nil".

// mint mints a canary of kind for t, failing the scenario on error.
func (e *Env) mint(t *tenants.Tenant, kind tenants.Kind) tenants.Canary {
	e.T.Helper()
	c, err := t.Mint(kind)
	if err != nil {
		e.T.Fatalf("%v", err)
	}
	return c
}

// mintWorkdir mints a working directory for t, failing the scenario on
// error.
func (e *Env) mintWorkdir(t *tenants.Tenant) string {
	e.T.Helper()
	dir, err := t.MintWorkdir()
	if err != nil {
		e.T.Fatalf("%v", err)
	}
	return dir
}

// addTenant adds a tenant named name to the run's set (its canaries and
// provider; the caller decides when it joins e.Tenants), failing the
// scenario on error.
func (e *Env) addTenant(name string) *tenants.Tenant {
	e.T.Helper()
	t, err := e.Box.Set.AddTenant(name)
	if err != nil {
		e.T.Fatalf("%v", err)
	}
	return t
}

// checker compiles the canaries of ts, failing the scenario on error.
func (e *Env) checker(ts []*tenants.Tenant) *invariants.Checker {
	e.T.Helper()
	chk, err := invariants.NewChecker(ts)
	if err != nil {
		e.T.Fatalf("compile the canaries: %v", err)
	}
	return chk
}
