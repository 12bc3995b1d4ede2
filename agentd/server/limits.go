package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/tenantcanary/tenantcanary/agentd/fair"
	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/rpc"
)

// Limits bound the work agentd takes on at once and share it fairly: the
// profiles with work waiting take turns for a free slot (round-robin), and
// inside a profile its connections take turns, so a tenant's many
// connections share one profile's slots. Work past a queue bound is
// refused at once with rpc.CodeTooBusy (4290) and a retry hint.
type Limits struct {
	Requests        int // requests handled at once, in all
	ProfileRequests int // requests addressing one profile handled at once
	ConnRequests    int // requests of one connection handled at once
	Turns           int // turns (model and tool calls) running at once, in all
	ProfileTurns    int // turns of one profile running at once
	ConnQueue       int // requests, and turns, one connection may have waiting
	ProfileQueue    int // requests, and turns, one profile may have waiting
	Queue           int // requests, and turns, waiting in all
	// ProfileSessions bounds the live sessions of connections in one
	// profile; session.create and session.resume past it get 4290.
	ProfileSessions int
	// RetryAfter is the hint a refusal carries (retry_after_ms).
	RetryAfter time.Duration
	// RefusalDelay holds a refusal's reply back, so that a client flooding
	// past its limits is answered, and read, no faster (a tarpit).
	RefusalDelay time.Duration
}

// DefaultLimits suit the machine: request handlers are short and share
// the CPUs; turns mostly wait on their provider, so more of them run.
func DefaultLimits() Limits {
	cpu := runtime.NumCPU()
	return Limits{
		Requests: max(8, 4*cpu), ProfileRequests: max(2, cpu), ConnRequests: 2,
		Turns: max(16, 8*cpu), ProfileTurns: 4,
		ConnQueue: 256, ProfileQueue: 1024, Queue: 4096, ProfileSessions: 256,
		RetryAfter: time.Second, RefusalDelay: 250 * time.Millisecond,
	}
}

// withDefaults fills the zero fields from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	for _, f := range []struct{ v, d *int }{
		{&l.Requests, &d.Requests}, {&l.ProfileRequests, &d.ProfileRequests}, {&l.ConnRequests, &d.ConnRequests},
		{&l.Turns, &d.Turns}, {&l.ProfileTurns, &d.ProfileTurns},
		{&l.ConnQueue, &d.ConnQueue}, {&l.ProfileQueue, &d.ProfileQueue}, {&l.Queue, &d.Queue},
		{&l.ProfileSessions, &d.ProfileSessions},
	} {
		if *f.v == 0 {
			*f.v = *f.d
		}
	}
	if l.RetryAfter == 0 {
		l.RetryAfter = d.RetryAfter
	}
	if l.RefusalDelay == 0 {
		l.RefusalDelay = d.RefusalDelay
	}
	return l
}

// Validate says what is wrong with l, naming the flag-shaped field.
func (l Limits) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"max-requests", l.Requests}, {"profile-requests", l.ProfileRequests}, {"conn-requests", l.ConnRequests},
		{"max-turns", l.Turns}, {"profile-turns", l.ProfileTurns},
		{"conn-queue", l.ConnQueue}, {"profile-queue", l.ProfileQueue}, {"max-queue", l.Queue},
		{"profile-sessions", l.ProfileSessions},
	} {
		if f.v < 0 {
			return fmt.Errorf("limit %s must be positive (0 = default), got %d", f.name, f.v)
		}
	}
	if l.RetryAfter < 0 || l.RefusalDelay < 0 {
		return fmt.Errorf("limits retry-after and refusal-delay must not be negative, got %s and %s", l.RetryAfter, l.RefusalDelay)
	}
	return nil
}

// unknownGroup is where requests addressing no existing profile queue:
// made-up names share one group instead of buying one each.
const unknownGroup = "?unknown"

func (l Limits) requestScheduler() *fair.Scheduler {
	return fair.New(fair.Limits{Slots: l.Requests, PerGroup: l.ProfileRequests, PerMember: l.ConnRequests,
		MemberQueue: l.ConnQueue, GroupQueue: l.ProfileQueue, Queue: l.Queue})
}

func (l Limits) turnScheduler() *fair.Scheduler {
	return fair.New(fair.Limits{Slots: l.Turns, PerGroup: l.ProfileTurns, PerMember: l.ProfileTurns,
		MemberQueue: l.ConnQueue, GroupQueue: l.ProfileQueue, Queue: l.Queue})
}

// turnGroup is the group a turn of profile, started by member (a
// connection, or a detached turn's source), queues in: the profile, so a
// tenant's connections share its turns; with the per-connection-share
// fault, the profile and the member, so each connection buys a share.
func (s *Server) turnGroup(profile, member string) string {
	if s.opts.Faults.Has(faults.PerConnectionShare) {
		return profile + "\x00" + member
	}
	return profile
}

// Limits returns the limits in force (zero with the no-conn-limit fault).
func (s *Server) Limits() Limits { return s.limits }

// Load is a snapshot of the requests and turns running and waiting, by
// profile.
func (s *Server) Load() (requests, turns fair.Stats) { return s.reqs.Stats(), s.turnQ.Stats() }

// Admit is the dispatcher's admission (rpc.Dispatcher.SetAdmit): a request
// waits for a slot of its profile and connection, or is refused when
// their queue is full. Register installs it.
func (s *Server) Admit(ctx context.Context, c *rpc.Call) (func(), error) {
	t, err := s.reqs.Enqueue(s.requestProfile(c), c.Conn.ID())
	if err != nil {
		return nil, s.refusal("requests", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.baseCtx, cancel)
	defer stop()
	go func() { // ends with this call (cancel) or the connection
		select {
		case <-c.Conn.Done():
			cancel()
		case <-wctx.Done():
		}
	}()
	if err := t.Wait(wctx); err != nil {
		if errors.Is(err, fair.ErrClosed) || s.baseCtx.Err() != nil {
			return nil, rpc.Errorf(rpc.CodeUnavailable, "agentd is shutting down")
		}
		return nil, rpc.Errorf(rpc.CodeUnavailable, "%s: abandoned while waiting for a slot: %v", c.Method, err)
	}
	return t.Release, nil
}

// requestProfile is the profile a request counts against: the connection's
// tenant when the transport knows it; else the profile the request
// addresses (its session's, its profile param's, or the launch profile).
func (s *Server) requestProfile(c *rpc.Call) string {
	if tc, ok := c.Conn.(rpc.TenantConn); ok && tc.Tenant() != "" {
		return tc.Tenant()
	}
	var p targetParams
	_ = json.Unmarshal(c.Params, &p) // bad params are the handler's to refuse
	if p.SessionID != "" && c.Method != "session.resume" {
		s.mu.Lock()
		sess := s.sessions[p.SessionID]
		s.mu.Unlock()
		if sess == nil {
			return unknownGroup
		}
		return sess.Scope.Profile.Name
	}
	if p.Profile == "" {
		return profile.LaunchName
	}
	if _, err := s.opts.Homes.Get(p.Profile); err != nil {
		return unknownGroup
	}
	return p.Profile
}

// tooManySessions is the refusal of a session past ProfileSessions, or
// nil. s.mu is held.
func (s *Server) tooManySessions(name string) *rpc.Error {
	if s.limits.ProfileSessions == 0 {
		return nil
	}
	n := 0
	for _, sess := range s.sessions {
		if sess.conn != nil && sess.Scope.Profile.Name == name {
			n++
		}
	}
	if n < s.limits.ProfileSessions {
		return nil
	}
	return &rpc.Error{
		Code:    rpc.CodeTooBusy,
		Message: fmt.Sprintf("too many live sessions: profile %q has %d; close one, or retry after %s", name, n, s.limits.RetryAfter),
		Data:    map[string]any{"retry_after_ms": s.limits.RetryAfter.Milliseconds(), "bound": "sessions", "limit": s.limits.ProfileSessions},
	}
}

// ErrTooBusy is returned for a detached turn refused by a full queue.
var ErrTooBusy = errors.New("too many turns in flight")

// refusal is the reply to work a full queue refused: 4290 with a hint.
func (s *Server) refusal(what string, err error) *rpc.Error {
	if errors.Is(err, fair.ErrClosed) {
		return rpc.Errorf(rpc.CodeUnavailable, "agentd is shutting down")
	}
	var qf *fair.QueueFullError
	if !errors.As(err, &qf) {
		return internalError("admit %s: %v", what, err)
	}
	var where string
	switch qf.Bound {
	case "member":
		where = "on this connection"
	case "group":
		where = fmt.Sprintf("for profile %q", qf.Name)
	default:
		where = "in agentd"
	}
	return &rpc.Error{
		Code:    rpc.CodeTooBusy,
		Message: fmt.Sprintf("too many %s in flight: %d already waiting %s; retry after %s", what, qf.Limit, where, s.limits.RetryAfter),
		Data:    map[string]any{"retry_after_ms": s.limits.RetryAfter.Milliseconds(), "bound": qf.Bound, "limit": qf.Limit},
	}
}
