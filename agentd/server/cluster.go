package server

import (
	"context"
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/tenantcanary/tenantcanary/agentd/cluster"
	"github.com/tenantcanary/tenantcanary/agentd/llm"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/rpc"
	"github.com/tenantcanary/tenantcanary/agentd/scope"
)

// Cluster mode (Options.Cluster, `agentd serve --postgres --redis`): the
// server's sessions and messages live in the cluster's PostgreSQL, and
// what the replicas share goes through its Redis (package cluster). Each
// hook below does nothing on a server of its own.

// clusterInit wires the cluster into a new server: its state opener and
// its handlers of other replicas' events and revocations.
func (s *Server) clusterInit() {
	cl := s.opts.Cluster
	if cl == nil {
		return
	}
	s.pool.SetState(cl.State)
	cl.OnEvent(s.clusterEvent)
	cl.OnRevoke(s.revokeLapsed)
}

// tenantKey is p's credential hash: from the cluster's auth cache in
// cluster mode, else from the server's key cache (its .env).
func (s *Server) tenantKey(p profile.Profile) ([sha256.Size]byte, bool, error) {
	if s.opts.Cluster == nil {
		return s.keys.tenantKey(p)
	}
	ctx, cancel := context.WithTimeout(s.baseCtx, 5*time.Second)
	defer cancel()
	return s.opts.Cluster.TenantKey(ctx, p.Name, func() ([sha256.Size]byte, bool, error) { return s.keys.tenantKey(p) })
}

// clusterRevoke announces that profile's credential changed: every
// replica drops it from the auth cache and ends the connections it no
// longer opens.
func (s *Server) clusterRevoke(ctx context.Context, name string) {
	if s.opts.Cluster == nil {
		return
	}
	if err := s.opts.Cluster.Revoke(context.WithoutCancel(ctx), name); err != nil {
		s.log.Error("cluster: revoke", "profile", name, "err", err)
	}
}

// revokeLapsed checks this server's connections bound to profile name
// now, and revokes those whose credential lapsed (their sessions end):
// after profiles.rotate_key, and in cluster mode whenever any replica
// announces a revocation of the profile's credential.
func (s *Server) revokeLapsed(name string) {
	s.mu.Lock()
	var conns []rpc.Conn
	for _, conn := range s.conns {
		if boundTo(conn) == name {
			conns = append(conns, conn)
		}
	}
	s.mu.Unlock()
	for _, conn := range conns {
		b, ok := conn.(tenantBound)
		if !ok {
			continue
		}
		if why, final := s.credentialLapse(b); why != "" && final {
			s.revokeLater(conn, why)
		}
	}
}

// clusterResumeScope is sc, or under the resume-wrong-profile fault the
// scope of the profile the cluster names for stored (see
// cluster.ResumeProfile).
func (s *Server) clusterResumeScope(ctx context.Context, sc *scope.Scope, stored string) *scope.Scope {
	cl := s.opts.Cluster
	if cl == nil {
		return sc
	}
	name := cl.ResumeProfile(ctx, sc.Profile.Name, stored)
	if name == sc.Profile.Name {
		return sc
	}
	other, err := s.pool.Get(ctx, name)
	if err != nil {
		return sc
	}
	return other // the fault's bug: another profile's scope
}

// clusterOpened routes a session just opened to this replica (telling
// the replica that held it before) and follows its profile's events; the
// session stops following them when it closes.
func (s *Server) clusterOpened(ctx context.Context, sess *Session) error {
	cl := s.opts.Cluster
	if cl == nil {
		return nil
	}
	name := sess.Scope.Profile.Name
	prev, err := cl.Claim(ctx, name, sess.Stored)
	if err != nil {
		return err
	}
	if prev != "" {
		ev := cluster.Event{Type: cluster.EventSessionMoved, Profile: name, Stored: sess.Stored, Payload: map[string]any{"stored_session_id": sess.Stored}}
		if err := cl.Publish(ctx, ev); err != nil {
			s.log.Warn("cluster: announce a moved session", "profile", name, "err", err)
		}
	}
	stop, err := cl.Follow(ctx, name)
	if err != nil {
		return err
	}
	sess.mu.Lock()
	sess.unfollow = stop
	sess.mu.Unlock()
	return nil
}

// clusterPublish sends an event of profile name to the other replicas.
func (s *Server) clusterPublish(ctx context.Context, name, typ string, payload map[string]any) {
	cl := s.opts.Cluster
	if cl == nil {
		return
	}
	if err := cl.Publish(context.WithoutCancel(ctx), cluster.Event{Type: typ, Profile: name, Payload: payload}); err != nil {
		s.log.Warn("cluster: publish", "profile", name, "type", typ, "err", err)
	}
}

// clusterEvent hands an event another replica sent on channel to the
// sessions here that follow channel: the sessions of the profile whose
// channel it is.
func (s *Server) clusterEvent(channel string, ev cluster.Event) {
	cl := s.opts.Cluster
	s.mu.Lock()
	var to []*Session
	for _, sess := range s.sessions {
		if sess.conn != nil && cl.EventsChannel(sess.Scope.Profile.Name) == channel {
			to = append(to, sess)
		}
	}
	s.mu.Unlock()
	for _, sess := range to {
		if ev.Type == cluster.EventSessionMoved && sess.Stored != ev.Stored {
			continue
		}
		payload := map[string]any{"replica": ev.Replica, "profile": ev.Profile}
		for k, v := range ev.Payload {
			payload[k] = v
		}
		_ = sess.conn.Send(rpc.EventFrame(rpc.Event{Type: ev.Type, SessionID: sess.ID, Payload: payload}))
	}
}

// clusterShare takes one of profile's turns running over every replica,
// once the turn holds its slot here: past the cluster's bound the turn
// waits (as it waits for a slot here) until a share is free or ctx ends.
func (s *Server) clusterShare(ctx context.Context, name string) (func(), error) {
	cl := s.opts.Cluster
	if cl == nil {
		return func() {}, nil
	}
	release, err := cl.AcquireWait(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("the turn's share of profile %q over every replica: %w", name, err)
	}
	return release, nil
}

// responseCache is the cluster's response cache of profile name (nil
// when there is none).
func (s *Server) responseCache(name string) llm.Cache {
	if s.opts.Cluster == nil {
		return nil
	}
	return s.opts.Cluster.ResponseCache(name)
}

// clusterPurge deletes a deleted profile's rows from the shared state.
func (s *Server) clusterPurge(ctx context.Context, name string) {
	cl := s.opts.Cluster
	if cl == nil {
		return
	}
	if err := cl.Postgres().PurgeProfile(context.WithoutCancel(ctx), name); err != nil {
		s.log.Error("cluster: purge a deleted profile's state", "profile", name, "err", err)
	}
}

// clientOf is the provider client of a turn in sc: the scope's, with its
// profile's response cache in cluster mode.
func (s *Server) clientOf(sc *scope.Scope, snap *scope.Snapshot) *llm.Client {
	c := sc.Client(snap)
	c.Cache = s.responseCache(sc.Profile.Name)
	return c
}
