package server

import (
	"context"
	"errors"

	"github.com/tenantcanary/tenantcanary/agentd/agent"
	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/rpc"
	"github.com/tenantcanary/tenantcanary/agentd/scope"
)

// callerScope is the scope of the profile a call addresses (name, or the
// launch profile when empty), after the connection's binding allowed it,
// held for the call (see scopeFor): release it when the call is done.
func (s *Server) callerScope(ctx context.Context, c *rpc.Call, name string) (*scope.Scope, func(), error) {
	name, err := s.profileFor(c, name)
	if err != nil {
		return nil, nil, err
	}
	sc, release, err := s.scopeFor(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	// A tenant's credential is judged against the home the call now holds:
	// one checked before a delete and re-create could open the new home.
	if own := boundTo(c.Conn); own != "" && !s.credentialOpens(c.Conn, sc.Profile) {
		release()
		return nil, nil, rpc.Errorf(rpc.CodeForbidden, "%s: this connection's credential no longer opens its profile (deleted, re-created or rotated): reconnect", c.Method)
	}
	return sc, release, nil
}

// inScope answers a profile-addressed call: it binds c's params into p,
// runs check (when not nil) on what was bound, and calls do in callerScope
// of the profile *profile names (a field of p), held until do returns: the
// frame every profile-addressed method shares.
func (s *Server) inScope(ctx context.Context, c *rpc.Call, p any, profile *string, check func() error, do func(*scope.Scope) (any, error)) (any, error) {
	return answerIn(c, p, check, func() (*scope.Scope, func(), error) { return s.callerScope(ctx, c, *profile) }, do)
}

// targetParams are the params that address a settings write (see
// target): a session of the caller's, or a profile by name. A settings
// method's params embed them.
type targetParams struct {
	SessionID string `json:"session_id"`
	Profile   string `json:"profile"`
}

// inTarget is inScope for a settings write, in the scope *at (embedded in
// p) addresses once bound: see target.
func (s *Server) inTarget(ctx context.Context, c *rpc.Call, p any, at *targetParams, check func() error, do func(*scope.Scope) (any, error)) (any, error) {
	return answerIn(c, p, check, func() (*scope.Scope, func(), error) { return s.target(ctx, c, at.SessionID, at.Profile) }, do)
}

// answerIn binds c's params into p, runs check (when not nil), and calls
// do in the scope resolve returns, released when do returns. Bad params
// are refused before any profile is looked up.
func answerIn(c *rpc.Call, p any, check func() error, resolve func() (*scope.Scope, func(), error), do func(*scope.Scope) (any, error)) (any, error) {
	if err := c.Bind(p); err != nil {
		return nil, err
	}
	if check != nil {
		if err := check(); err != nil {
			return nil, err
		}
	}
	sc, release, err := resolve()
	if err != nil {
		return nil, err
	}
	defer release()
	return do(sc)
}

// boundSession binds c's params into p and returns the live session of the
// caller's that *id (a field of p) names.
func (s *Server) boundSession(c *rpc.Call, p any, id *string) (*Session, error) {
	if err := c.Bind(p); err != nil {
		return nil, err
	}
	return s.ownedSession(c, *id)
}

// required is an inScope check that refuses an empty *v with msg.
func required(v *string, msg string) func() error {
	return func() error {
		if *v == "" {
			return rpc.Errorf(rpc.CodeInvalidParams, "%s", msg)
		}
		return nil
	}
}

// scopeFor returns a profile's scope held for one piece of work (a
// scope.Pool use: the profile's deletion waits for release), mapping
// errors to protocol codes. A profile being deleted is unknown (4064). A
// bad name is refused before it meets a path.
func (s *Server) scopeFor(ctx context.Context, name string) (*scope.Scope, func(), error) {
	s.mu.Lock()
	shutting := s.shutting
	s.mu.Unlock()
	if shutting {
		return nil, nil, rpc.Errorf(rpc.CodeUnavailable, "agentd is shutting down")
	}
	if err := checkName(name); err != nil {
		return nil, nil, err
	}
	sc, release, err := s.pool.Use(ctx, name)
	switch {
	case errors.Is(err, profile.ErrUnknownProfile):
		return nil, nil, rpc.Errorf(rpc.CodeUnknownProfile, "unknown profile %q", name)
	case errors.Is(err, scope.ErrClosed):
		return nil, nil, rpc.Errorf(rpc.CodeUnavailable, "agentd is shutting down")
	case err != nil:
		s.log.Error("open profile scope", "profile", name, "err", "see the profile's agent.log")
		return nil, nil, internalError("open profile %q: %v", name, err)
	}
	return sc, release, nil
}

// toolsOf is the tools of sc's turns (Options.Tools).
func (s *Server) toolsOf(sc *scope.Scope) *agent.Registry {
	if s.opts.Tools != nil {
		return s.opts.Tools(sc)
	}
	return s.registry
}

// ownedSession returns a live session the calling connection owns.
func (s *Server) ownedSession(c *rpc.Call, id string) (*Session, error) {
	if id == "" {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "%s: session_id is required", c.Method)
	}
	s.mu.Lock()
	sess := s.sessions[id]
	s.mu.Unlock()
	if sess == nil {
		return nil, rpc.Errorf(rpc.CodeUnknownSession, "unknown session %q", id)
	}
	if (sess.conn == nil || sess.conn.ID() != c.Conn.ID()) && !s.opts.Faults.Has(faults.SessionFollowsID) {
		return nil, rpc.Errorf(rpc.CodeForbidden, "session %q belongs to another connection", id)
	}
	return sess, nil
}

// target resolves the profile a settings write addresses: a session of the
// caller's, a profile by name, or the launch profile; held for the call.
func (s *Server) target(ctx context.Context, c *rpc.Call, sessionID, profileName string) (*scope.Scope, func(), error) {
	if sessionID != "" && profileName != "" {
		return nil, nil, rpc.Errorf(rpc.CodeInvalidParams, "%s: give session_id or profile, not both", c.Method)
	}
	if sessionID != "" {
		sess, err := s.ownedSession(c, sessionID)
		if err != nil {
			return nil, nil, err
		}
		// The session's profile may have been deleted since, and a profile
		// of the same name created: that one is not the session's.
		sc, release, err := s.scopeFor(ctx, sess.Scope.Profile.Name)
		if err != nil {
			return nil, nil, err
		}
		if sc != sess.Scope {
			release()
			return nil, nil, rpc.Errorf(rpc.CodeUnknownProfile, "unknown profile %q: the session's profile was deleted", sess.Scope.Profile.Name)
		}
		return sc, release, nil
	}
	return s.callerScope(ctx, c, profileName)
}
