package server

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/agentd/agent"
	"github.com/tenantcanary/tenantcanary/agentd/fair"
	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/llm"
	"github.com/tenantcanary/tenantcanary/agentd/terminal"
)

// runTurn plays one turn of a session in its profile's scope, once its
// ticket holds a turn slot.
func (s *Server) runTurn(ctx context.Context, sess *Session, text string, ticket *fair.Ticket) (string, error) {
	s.running.Add(1)
	defer s.running.Add(-1)
	sess.turn.Lock()
	defer sess.turn.Unlock()
	// The session is free again the moment message.complete goes out, so a
	// client may submit its next prompt as soon as it sees it; the next
	// turn still waits for this one's history on sess.turn.
	release := sync.OnceFunc(func() {
		sess.mu.Lock()
		sess.busy = false
		sess.cancelTurn = nil
		sess.mu.Unlock()
	})
	defer release()
	emit := func(typ string, payload any) {
		if typ == "message.complete" {
			release()
		}
		s.tmpCopyFault(typ, payload)
		sess.emit(typ, payload)
	}
	if err := ticket.Wait(ctx); err != nil {
		if errors.Is(err, fair.ErrClosed) || s.baseCtx.Err() != nil {
			err = ErrShuttingDown
		}
		err = fmt.Errorf("turn not started: %w", err)
		emit("message.start", map[string]any{})
		emit("message.complete", map[string]any{"text": err.Error(), "status": "error"})
		return "", err
	}
	share, err := s.clusterShare(ctx, sess.Scope.Profile.Name)
	if err != nil {
		err = fmt.Errorf("turn not started: %w", err)
		emit("message.start", map[string]any{})
		emit("message.complete", map[string]any{"text": err.Error(), "status": "error"})
		return "", err
	}
	defer share()
	sc := sess.Scope
	// The turn holds its profile's scope: a delete waits for it (and
	// cancels it first), and a turn of a deleted profile never starts.
	cur, releaseScope, err := s.pool.Use(ctx, sc.Profile.Name)
	if err == nil {
		defer releaseScope()
	}
	if err != nil || cur != sc {
		err := fmt.Errorf("profile %q is no longer served (deleted)", sc.Profile.Name)
		emit("message.start", map[string]any{})
		emit("message.complete", map[string]any{"text": err.Error(), "status": "error"})
		return "", err
	}
	stopOnDelete := context.AfterFunc(sc.Context(), sess.cancelCurrentTurn)
	defer stopOnDelete()
	snap, err := sc.Load()
	if err != nil {
		sc.Log.Error("turn: load profile", "session", sess.ID, "err", err)
		emit("message.start", map[string]any{})
		emit("message.complete", map[string]any{"text": err.Error(), "status": "error"})
		return "", err
	}
	system, err := sc.SystemPrompt(snap.Config)
	if err != nil {
		sc.Log.Error("turn: system prompt", "session", sess.ID, "err", err)
		emit("message.start", map[string]any{})
		emit("message.complete", map[string]any{"text": err.Error(), "status": "error"})
		return "", err
	}
	tools := s.toolsOf(sc)
	sess.mu.Lock()
	history := sess.history
	sess.mu.Unlock()
	model := snap.Config.Model.Default
	if s.opts.Faults.Has(faults.ModelBleed) {
		model = s.launchModel()
	}
	if s.opts.Faults.Has(faults.LogSecretEncoded) {
		s.log.Info("turn start", "profile", sc.Profile.Name, "key_b64", base64.StdEncoding.EncodeToString([]byte(snap.Key)))
	}
	started := time.Now()
	sc.Log.Info("turn start", "session", sess.ID, "stored", sess.Stored, "model", snap.Config.Model.Default,
		"base_url", snap.Config.Model.BaseURL, "key_env", snap.Config.Model.KeyEnv, "key", snap.KeyFingerprint())
	answer, history, err := agent.Run(ctx, agent.Turn{
		Client:        s.clientOf(sc, snap),
		Model:         model,
		System:        system,
		History:       history,
		Tools:         tools,
		MaxIterations: s.opts.MaxIterations,
		ContextLength: snap.Config.Model.ContextLength,
		Env: &agent.Env{
			Session: sess.ID, Stored: sess.Stored, Profile: sc.Profile.Name, Home: sc.Profile.Home,
			Shell: func(ctx context.Context) (*terminal.Shell, error) { return sess.shellFor(ctx, snap) },
			Emit:  emit,
		},
		Emit:  emit,
		Check: s.turnGuard(sess),
		Persist: func(ctx context.Context, m llm.Message) error {
			// Commit even when the turn is being cancelled: what was made is kept.
			return sc.DB.Append(context.WithoutCancel(ctx), sess.Stored, toStored(m))
		},
	}, text)
	sess.mu.Lock()
	sess.history = history
	sess.mu.Unlock()
	if err != nil {
		sc.Log.Error("turn failed", "session", sess.ID, "err", err, "elapsed", time.Since(started))
		return "", err
	}
	sc.Log.Info("turn complete", "session", sess.ID, "elapsed", time.Since(started))
	return answer, nil
}
