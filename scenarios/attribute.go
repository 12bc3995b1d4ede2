package scenarios

import (
	"errors"
	"fmt"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// attributed returns err unchanged, first recording a finding of the
// invariant it breaks when the failure of t's step on session sid was
// caused by another tenant's data or action, so it is reported as what it
// is, not only as a harness failure:
//   - the server refused as another connection's (4030) a session it gave
//     t itself (authz: the id is someone else's, or another took it);
//   - the failure carries another tenant's canary (an answer no provider
//     of t gave carries that provider's reply canary): text.
func (e *Env) attributed(t *tenants.Tenant, sid string, err error) error {
	if err == nil {
		return nil
	}
	var rerr *harness.RPCError
	if errors.As(err, &rerr) && rerr.Code == 4030 && e.gave(t, sid) {
		e.Find(invariants.Finding{Invariant: invariants.Authz, Tenant: t.Name, Where: invariants.Where{Label: "session " + sid, Method: rerr.Method},
			Detail: fmt.Sprintf("the server refused session %s, which it gave %s, with %d (%s): the session is another's, or another took it", sid, t.Name, rerr.Code, rerr.Message)})
	}
	if chk, cerr := invariants.NewChecker(e.Box.Set.Tenants); cerr == nil {
		for _, f := range chk.TextLeaks("the failure of a step of "+t.Name, []byte(err.Error()), t.Name) {
			e.Find(f)
		}
	}
	return err
}

// gave reports whether the server gave t the session sid (live or
// stored).
func (e *Env) gave(t *tenants.Tenant, sid string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.sessions {
		if s.tenant == t && sid != "" && (s.info.SessionID == sid || s.info.StoredSessionID == sid) {
			return true
		}
	}
	return false
}
