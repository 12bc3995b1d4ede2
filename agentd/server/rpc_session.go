package server

import (
	"context"
	"errors"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/llm"
	"github.com/tenantcanary/tenantcanary/agentd/rpc"
	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
	"github.com/tenantcanary/tenantcanary/agentd/scope"
	"github.com/tenantcanary/tenantcanary/agentd/store"
)

type sessionInfo struct {
	Model       string `json:"model"`
	ProfileName string `json:"profile_name"`
	Cwd         string `json:"cwd"`
}

type sessionResult struct {
	SessionID       string      `json:"session_id"`
	StoredSessionID string      `json:"stored_session_id"`
	Info            sessionInfo `json:"info"`
	Messages        int         `json:"messages,omitempty"`
}

func (s *Server) openSession(ctx context.Context, c *rpc.Call, sc *scope.Scope, stored string) (*sessionResult, error) {
	// A full profile is refused before its config is read: a flood of
	// session.create past the limit then costs the server next to nothing
	// (a refusal that parsed three YAML files first was most of a
	// flood's CPU).
	s.mu.Lock()
	full := s.tooManySessions(sc.Profile.Name)
	s.mu.Unlock()
	if full != nil {
		return nil, full
	}
	snap, err := sc.Load()
	if err != nil {
		sc.Log.Error("load config", "err", err)
		return nil, internalError("load profile %q: %v", sc.Profile.Name, err)
	}
	var history []llm.Message
	resumed := stored != ""
	if stored == "" {
		st, err := sc.DB.CreateSession(ctx, store.Session{Profile: sc.Profile.Name, Model: snap.Config.Model.Default, Source: s.opts.Source})
		if err != nil {
			return nil, internalError("create session in profile %q: %v", sc.Profile.Name, err)
		}
		stored = st.ID
	} else {
		if _, err := sc.DB.Session(ctx, stored); err != nil {
			if errors.Is(err, store.ErrUnknownSession) {
				return nil, rpc.Errorf(rpc.CodeUnknownSession, "unknown stored session %q in profile %q", stored, sc.Profile.Name)
			}
			return nil, internalError("resume session: %v", err)
		}
		msgs, err := sc.DB.Messages(ctx, stored)
		if err != nil {
			return nil, internalError("resume session: %v", err)
		}
		history = fromStored(msgs)
	}
	model := snap.Config.Model.Default
	if s.opts.Faults.Has(faults.ModelBleed) {
		model = s.launchModel()
	}
	sess := &Session{ID: s.liveID(), Stored: stored, Scope: sc, conn: c.Conn, history: history,
		sandboxFor: func(cwd string) (*sandbox.Policy, error) { return s.shellSandbox(sc, cwd) }}
	s.seedSessionFaults(sess)
	s.mu.Lock()
	if s.shutting {
		s.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodeUnavailable, "agentd is shutting down")
	}
	if s.pool.Deleting(sc.Profile.Name) {
		// A delete marks the profile before it collects its sessions
		// under s.mu: this one would be missed, so it is never made.
		s.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodeUnknownProfile, "unknown profile %q: it is being deleted", sc.Profile.Name)
	}
	if full := s.tooManySessions(sc.Profile.Name); full != nil { // raced past the first check
		s.mu.Unlock()
		return nil, full
	}
	s.sessions[sess.ID] = sess
	s.mu.Unlock()
	if err := s.clusterOpened(ctx, sess); err != nil {
		s.mu.Lock()
		delete(s.sessions, sess.ID)
		s.mu.Unlock()
		sess.close(EndClosed)
		return nil, internalError("open session in profile %q: %v", sc.Profile.Name, err)
	}
	// Registered first, so the start hooks' nested calls run as it.
	sess.start(ctx, s.toolsOf(sc), map[string]any{"resumed": resumed, "source": s.opts.Source})
	sc.Log.Info("session open", "session", sess.ID, "stored", stored, "resumed", resumed, "model", snap.Config.Model.Default)
	return &sessionResult{
		SessionID: sess.ID, StoredSessionID: stored, Messages: len(history),
		Info: sessionInfo{Model: model, ProfileName: sc.Profile.Name, Cwd: snap.Config.Terminal.Cwd},
	}, nil
}

func (s *Server) sessionCreate(ctx context.Context, c *rpc.Call) (any, error) {
	var p struct {
		Profile string `json:"profile"`
	}
	return s.inScope(ctx, c, &p, &p.Profile, nil, func(sc *scope.Scope) (any, error) {
		return s.openSession(ctx, c, sc, "")
	})
}

func (s *Server) sessionResume(ctx context.Context, c *rpc.Call) (any, error) {
	var p struct {
		SessionID string `json:"session_id"`
		Profile   string `json:"profile"`
	}
	return s.inScope(ctx, c, &p, &p.Profile, required(&p.SessionID, "session.resume: session_id (a stored session id) is required"), func(sc *scope.Scope) (any, error) {
		return s.openSession(ctx, c, s.clusterResumeScope(ctx, s.resumeScopeFault(ctx, sc, p.SessionID), p.SessionID), p.SessionID)
	})
}

func (s *Server) sessionClose(ctx context.Context, c *rpc.Call) (any, error) {
	var p struct {
		SessionID string `json:"session_id"`
	}
	sess, err := s.boundSession(c, &p, &p.SessionID)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	delete(s.sessions, sess.ID)
	s.mu.Unlock()
	sess.close(EndClosed)
	return map[string]any{"ok": true}, nil
}

func (s *Server) promptSubmit(ctx context.Context, c *rpc.Call) (any, error) {
	var p struct {
		SessionID string `json:"session_id"`
		Text      string `json:"text"`
	}
	sess, err := s.boundSession(c, &p, &p.SessionID)
	if err != nil {
		return nil, err
	}
	if p.Text == "" {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "prompt.submit: text is empty")
	}
	s.mu.Lock()
	if s.shutting {
		s.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodeUnavailable, "agentd is shutting down")
	}
	sess.mu.Lock()
	if sess.busy || sess.closed {
		sess.mu.Unlock()
		s.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodeConflict, "session %q is busy with a turn", sess.ID)
	}
	ticket, err := s.turnQ.Enqueue(s.turnGroup(sess.Scope.Profile.Name, c.Conn.ID()), c.Conn.ID())
	if err != nil {
		sess.mu.Unlock()
		s.mu.Unlock()
		return nil, s.refusal("turns", err)
	}
	sess.busy = true
	tctx, cancel := context.WithCancel(s.baseCtx)
	sess.cancelTurn = cancel
	sess.mu.Unlock()
	s.turns.Add(1)
	s.mu.Unlock()
	return rpc.Then{Result: map[string]string{"status": "streaming"}, After: func() {
		go func() {
			defer s.turns.Done()
			defer cancel()
			defer ticket.Release()
			s.runTurn(tctx, sess, p.Text, ticket)
		}()
	}}, nil
}
