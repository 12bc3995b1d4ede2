package scenarios

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// A step that failed because of another tenant is a finding of the
// invariant it breaks: a session the server gave the tenant refused as
// another connection's is authz; a failure carrying another tenant's reply
// canary (an answer no provider of this tenant gave) is a text finding.
func TestFailureCausedByAnotherTenantIsAFinding(t *testing.T) {
	t.Parallel()
	set, err := tenants.Build(t.TempDir(), tenants.Options{Names: tenants.Names(2), NoProviders: true})
	require.NoError(t, err)
	a, b := set.Tenants[0], set.Tenants[1]
	e := &Env{Box: &harness.Sandbox{Set: set}}
	e.sessions = []session{{tenant: a, info: harness.SessionInfo{SessionID: "live-a", StoredSessionID: "stored-a"}}}

	refused := fmt.Errorf("turn: %w", &harness.RPCError{Method: "prompt.submit", Code: 4030, Message: "session belongs to another connection"})
	assert.Same(t, refused, e.attributed(a, "live-a", refused), "the error is returned as it was")
	require.Len(t, e.pending, 1)
	assert.Equal(t, invariants.Authz, e.pending[0].Invariant)
	assert.Equal(t, a.Name, e.pending[0].Tenant)

	e.pending = nil
	_ = e.attributed(a, "not-given", refused)
	_ = e.attributed(a, "live-a", &harness.RPCError{Method: "prompt.submit", Code: 4090, Message: "busy"})
	assert.Empty(t, e.pending, "a session the server never gave it, or another refusal, is not attributed")

	_ = e.attributed(a, "live-a", errors.New("turn failed: answer was probe done for "+b.Name+" ["+b.Value(tenants.Reply)+"]"))
	require.NotEmpty(t, e.pending)
	assert.Equal(t, b.Name, e.pending[0].Owner)
	assert.Equal(t, tenants.Reply, e.pending[0].Kind)
	assert.True(t, e.pending[0].Invariant.Leak(), "%s", e.pending[0])
}
