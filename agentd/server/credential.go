package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/rpc"
)

// EndRevoked is why the sessions of a connection whose tenant credential
// was revoked ended (payload "reason" of their end hooks).
const EndRevoked = "credential revoked"

// ErrRevoked marks a turn ended because its connection's tenant credential
// no longer opens its profile.
var ErrRevoked = errors.New("credential revoked")

// A tenant-bound connection's credential is re-checked at every call it
// makes (gated, the one place every method passes), at every step of
// every turn it started (before the turn, before each model request, its
// retries included, and before each tool call: turnGuard) and at every
// nested call a plugin makes as one of its sessions (checkSession). The
// first check that finds it no longer the profile's API_SERVER_KEY (the
// key rotated, the key removed: the tenant disabled, or the profile
// deleted) revokes the connection:
// its live sessions end (their turns are cancelled, their shells killed),
// an `error` event says why, and every later call on it is refused with
// 4030, even if the key comes back. The connection stays open so the
// client reads the reason; it must reconnect with the current key.

// gated wraps a method's handler with the credential check of a
// tenant-bound connection.
func (s *Server) gated(h rpc.Handler) rpc.Handler {
	return func(ctx context.Context, c *rpc.Call) (any, error) {
		if err := s.checkCredential(c.Conn); err != nil {
			return nil, rpc.Errorf(rpc.CodeForbidden, "%s: %v", c.Method, err)
		}
		return h(ctx, c)
	}
}

// checkCredential is nil for an operator connection and for a tenant
// connection whose credential still opens its profile; otherwise it
// revokes the connection (once) and says why. With the stale-credential
// fault it checks nothing (profile-addressed calls still meet profileFor's
// check, as in agentd 0.14.1).
func (s *Server) checkCredential(conn rpc.Conn) error {
	b, ok := conn.(tenantBound)
	if !ok || b.Tenant() == "" || s.opts.Faults.Has(faults.StaleCredential) {
		return nil
	}
	s.mu.Lock()
	why, revoked := s.revoked[conn.ID()]
	s.mu.Unlock()
	if revoked {
		return fmt.Errorf("%w: %s; this connection is closed to every call: reconnect with the profile's current key", ErrRevoked, why)
	}
	why, final := s.credentialLapse(b)
	switch {
	case why == "":
		return nil
	case !final:
		return fmt.Errorf("the connection's credential cannot be checked now (%s): try again", why)
	}
	s.revokeConn(conn, why)
	return fmt.Errorf("%w: %s; this connection's sessions ended: reconnect with the profile's current key", ErrRevoked, why)
}

// credentialLapse says why b's credential does not open its profile now,
// or "" when it does. final is false when the check itself failed (its
// .env could not be read: too many open files, say, or a file that is no
// regular one): the call or step is refused, but the connection is not
// revoked for it.
func (s *Server) credentialLapse(b tenantBound) (why string, final bool) {
	p, err := s.opts.Homes.Get(b.Tenant())
	if errors.Is(err, profile.ErrUnknownProfile) {
		return "its profile was deleted", true
	}
	if err != nil {
		return "its profile cannot be opened", false
	}
	sum, found, err := s.tenantKey(p)
	switch {
	case err != nil:
		return "its profile's .env cannot be read", false
	case !found:
		return "its profile has no API_SERVER_KEY (the tenant was disabled)", true
	}
	given := sha256.Sum256([]byte(b.Credential()))
	if subtle.ConstantTimeCompare(sum[:], given[:]) != 1 {
		return "its profile's API_SERVER_KEY was rotated", true
	}
	return "", true
}

// revokeConn marks conn revoked for why, sends it an `error` event saying
// so, and ends its live sessions. It waits for their turns to return:
// a turn revoking its own connection calls it through revokeLater.
func (s *Server) revokeConn(conn rpc.Conn, why string) {
	s.mu.Lock()
	if _, done := s.revoked[conn.ID()]; done {
		s.mu.Unlock()
		return
	}
	select {
	case <-conn.Done(): // gone: DropConn ends its sessions
		s.mu.Unlock()
		return
	default:
	}
	s.revoked[conn.ID()] = why
	var gone []*Session
	for id, sess := range s.sessions {
		if sess.conn != nil && sess.conn.ID() == conn.ID() {
			gone = append(gone, sess)
			delete(s.sessions, id)
		}
	}
	s.mu.Unlock()
	s.log.Warn("tenant connection revoked: its sessions end", "conn", conn.ID(), "profile", boundTo(conn), "why", why, "sessions", len(gone))
	_ = conn.Send(rpc.EventFrame(rpc.Event{Type: "error", Payload: map[string]any{
		"message": "credential revoked: " + why + "; this connection's sessions ended and every later call is refused (4030): reconnect with the profile's current key",
	}}))
	closeSessions(gone, EndRevoked)
}

// turnGuard is the check a turn of sess makes before it starts, before
// each model request and before each tool call (agent.Turn.Check): nil for
// a detached session (cron, gateway) or an operator connection's. When the
// credential lapsed the turn ends with the reason, and the connection is
// revoked once the turn has returned.
func (s *Server) turnGuard(sess *Session) func(ctx context.Context, step string) error {
	b, ok := sess.conn.(tenantBound)
	if !ok || b.Tenant() == "" || s.opts.Faults.Has(faults.StaleCredential) {
		return nil
	}
	return func(ctx context.Context, step string) error {
		s.mu.Lock()
		why, revoked := s.revoked[sess.conn.ID()]
		s.mu.Unlock()
		if !revoked {
			var final bool
			if why, final = s.credentialLapse(b); why != "" && !final {
				return fmt.Errorf("the connection's credential cannot be checked before %s (%s); the turn stopped", step, why)
			}
			if why != "" {
				s.revokeLater(sess.conn, why)
			}
		}
		if why != "" {
			return fmt.Errorf("%w before %s: %s; the turn stopped", ErrRevoked, step, why)
		}
		return nil
	}
}

// revokeLater revokes conn beside the caller: a turn's revocation waits
// for the turn itself (its session's turn lock). Shutdown waits for it;
// once Shutdown has begun it ends every session itself, and nothing is
// started here.
func (s *Server) revokeLater(conn rpc.Conn, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutting {
		return
	}
	s.revoking.Add(1) // under s.mu before shutting is set: never beside Shutdown's Wait
	go func() {       // ends once the connection's sessions have closed
		defer s.revoking.Done()
		s.revokeConn(conn, why)
	}()
}

// checkSession is turnGuard for one step of sess outside its turn's loop:
// a plugin's nested tool call or model request made as the session.
func (s *Server) checkSession(ctx context.Context, sess *Session, step string) error {
	if guard := s.turnGuard(sess); guard != nil {
		return guard(ctx, step)
	}
	return nil
}
