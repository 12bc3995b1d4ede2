package scenarios

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
)

// noteOperatorSecret records a secret of the operator (the serve token)
// the scenario made: no tenant-visible place may carry it.
func (e *Env) noteOperatorSecret(kind, value string) {
	if value == "" {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.operator == nil {
		e.operator = map[string]string{}
	}
	for _, v := range e.operator {
		if v == value {
			return
		}
	}
	key := kind
	for i := 2; e.operator[key] != ""; i++ {
		key = fmt.Sprintf("%s_%d", kind, i)
	}
	e.operator[key] = value
}

// DialOperator opens a websocket connection with the operator's token (for
// operator work: creating and deleting profiles). No tenant owns it, so
// any tenant's canary on it is a finding.
func (e *Env) DialOperator(s *Serve) *harness.Conn {
	e.T.Helper()
	ctx, cancel := e.ctx(30 * time.Second)
	defer cancel()
	c, err := harness.DialWebsocket(ctx, s.Base, s.Token)
	if err != nil {
		e.T.Fatalf("connect to serve backend as the operator: %v", err)
	}
	e.T.Cleanup(c.Close)
	e.own(nil, "websocket operator", c)
	return c
}

// detectChecks are the checks of issue 12 over what the run produced:
// the operator's secrets in every tenant-visible place, and every tenant's
// secrets in the shared places of the sandbox.
func (e *Env) detectChecks(ctx context.Context, chk *invariants.Checker, conns []ownedConn, texts []ownedText) []invariants.Finding {
	secrets := map[string]string{}
	for k, v := range e.Box.Operator {
		secrets[k] = v
	}
	e.mu.Lock()
	for k, v := range e.operator {
		secrets[k] = v
	}
	e.mu.Unlock()
	var out []invariants.Finding
	op, err := invariants.NewOperator(secrets)
	if err != nil {
		return []invariants.Finding{{Invariant: invariants.Harness, Detail: err.Error()}}
	}
	out = append(out, op.Requests(e.Box.Set.Tenants)...)
	for _, c := range conns {
		if c.owner == nil {
			continue // the operator's own connection
		}
		for i, f := range c.conn.Frames() {
			for _, fd := range op.Text(c.owner.Name, c.label, f.Raw) {
				fd.Where.Frame = &i
				out = append(out, fd)
			}
		}
	}
	for _, x := range texts {
		out = append(out, op.Text(x.owner, x.label, x.data)...)
	}
	if e.Box.Target.Files && !e.Box.Target.Remote() {
		out = append(out, op.Homes(ctx, e.Box.Set)...)
		places := append(invariants.SharedPlaces(e.Box.Set, e.Box.Logs), e.Box.NewSystemTemp()...)
		out = append(out, chk.SharedPlaceLeaks(ctx, places)...)
	} else {
		e.skip(string(SharedPlace), "the target's files are not reachable from the harness")
	}
	return out
}

// excerpt is the start of b on one line, for a finding's evidence.
func excerpt(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
