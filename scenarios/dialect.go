package scenarios

import (
	"errors"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
)

// UnknownProfile opens a session of a profile that does not exist (name)
// on c, the launch tenant's connection, and judges the answer by the
// behaviour the target declared: "error" wants an error reply (agentd's
// 4064 when the target speaks DESIGN.md's protocol); "fallback_to_launch"
// wants a session of the launch profile, which is then the launch tenant's
// in every check: it must report the launch model, and a turn on it must
// reach the launch tenant's provider, as one of its snapshots.
func (e *Env) UnknownProfile(c *harness.Conn, name string) {
	e.T.Helper()
	d := e.Box.Target.Dialect.WithDefaults()
	ctx, cancel := e.ctx(30 * time.Second)
	defer cancel()
	s, err := c.CreateSession(ctx, name)
	launch := e.Launch()
	switch d.Behaviours.UnknownProfile {
	case harness.UnknownProfileFallback:
		if err != nil {
			e.T.Errorf("session.create of unknown profile %s: the target declares fallback_to_launch, got %v", name, err)
			return
		}
		e.mu.Lock()
		e.sessions = append(e.sessions, session{tenant: launch, info: s})
		e.mu.Unlock()
		if got := s.Info.Model; got != "" && got != launch.Model() {
			e.T.Errorf("session.create of unknown profile %s fell back, reporting model %q, not the launch profile's %q", name, got, launch.Model())
		}
		e.Turn(c, launch, s.SessionID)
	default:
		var rerr *harness.RPCError
		switch {
		case !errors.As(err, &rerr):
			e.T.Errorf("session.create of unknown profile %s: got %v, want an error reply (the target declares unknown_profile: error)", name, err)
		case len(d.Methods) == 0 && rerr.Code != 4064:
			e.T.Errorf("session.create of unknown profile %s: got %v, want error 4064", name, err)
		}
	}
}
