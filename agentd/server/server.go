package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenantcanary/tenantcanary/agentd/agent"
	"github.com/tenantcanary/tenantcanary/agentd/cron"
	"github.com/tenantcanary/tenantcanary/agentd/fair"
	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/llm"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/rpc"
	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
	"github.com/tenantcanary/tenantcanary/agentd/scope"
	"github.com/tenantcanary/tenantcanary/agentd/store"
	"github.com/tenantcanary/tenantcanary/agentd/terminal"
	"github.com/tenantcanary/tenantcanary/host"
)

// Version is reported in gateway.ready.
const Version = "agentd/0.1"

// Options configure a Server.
type Options struct {
	Homes   profile.Homes
	BaseEnv []string     // agentd's own environment (scrubbed before tools see it)
	Log     *slog.Logger // the server's own log (stderr); it never holds tenant data
	Source  string       // "tui" or "serve": recorded on stored sessions
	// Tools returns the tools offered in a profile's turns; the built-in
	// terminal tool when nil.
	Tools func(sc *scope.Scope) *agent.Registry
	// MaxIterations caps model calls per turn (agent.DefaultMaxIterations).
	MaxIterations int
	// Faults are seeded isolation bugs (test-only; see package faults).
	Faults faults.Set
	// Self is the argv that runs this program as agentd again (the prefix
	// of `agentd plugin-host`, say); see cli.SelfArgv.
	Self []string
	// Limits bound the requests and turns in flight (zero fields take
	// DefaultLimits). The no-conn-limit fault switches them off.
	Limits Limits
	// StopTimeout bounds how long Shutdown waits for turns it cancelled
	// (after its context's grace) before it gives up on them (ErrWedged);
	// DefaultStopTimeout when zero.
	StopTimeout time.Duration
}

// DefaultStopTimeout is Options.StopTimeout's default.
const DefaultStopTimeout = 5 * time.Second

// ErrWedged is returned by Shutdown when turns ignored their cancellation.
var ErrWedged = errors.New("turns still running after cancellation")

// Options returns the options the server was made with.
func (s *Server) Options() Options { return s.opts }

// Server holds the live sessions of every profile it serves.
type Server struct {
	opts Options
	pool *scope.Pool
	log  *slog.Logger

	baseCtx    context.Context // parent of every turn; cancelled by Shutdown
	cancelAll  context.CancelFunc
	turns      sync.WaitGroup
	mu         sync.Mutex
	sessions   map[string]*Session
	shutting   bool
	registry   *agent.Registry
	shutdownMu sync.Mutex
	conns      map[string]rpc.Conn // open connections (for the broadcast-events fault)
	shared     *terminal.Shell     // the shared-shell fault's one shell

	limits  Limits
	reqs    *fair.Scheduler // request handlers; nil = no limit (fault)
	turnQ   *fair.Scheduler // turns; nil = no limit (fault)
	running atomic.Int64    // turns started and not yet returned
}

// New returns a Server.
func New(opts Options) *Server {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Source == "" {
		opts.Source = "tui"
	}
	ctx, cancel := context.WithCancel(context.Background())
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = DefaultStopTimeout
	}
	reg := agent.NewRegistry()
	_ = reg.Register(agent.TerminalTool{})
	s := &Server{
		opts: opts, pool: scope.NewPool(opts.Homes, opts.BaseEnv, opts.Faults), log: opts.Log, conns: map[string]rpc.Conn{},
		baseCtx: ctx, cancelAll: cancel, sessions: map[string]*Session{}, registry: reg,
	}
	s.pool.SetLog(opts.Log)
	if !s.pooled() {
		// Single-tenant: the launch home is its operator's own, where the
		// operator-only keys may be set (see profile.OperatorOnly).
		s.pool.TrustLaunchOperatorKeys()
	}
	if !opts.Faults.Has(faults.NoConnLimit) {
		s.limits = opts.Limits.withDefaults()
		s.reqs, s.turnQ = s.limits.requestScheduler(), s.limits.turnScheduler()
	}
	return s
}

// Pool is the server's scope pool.
func (s *Server) Pool() *scope.Pool { return s.pool }

// Ready sends the gateway.ready event on conn.
func (s *Server) Ready(conn rpc.Conn) error {
	s.mu.Lock()
	s.conns[conn.ID()] = conn
	s.mu.Unlock()
	return conn.Send(rpc.EventFrame(rpc.Event{Type: "gateway.ready", Payload: map[string]any{
		"version": Version, "pid": os.Getpid(), "profile": profile.LaunchName,
	}}))
}

// Shutdown stops new work (turns still waiting for a slot end at once),
// waits for running turns until ctx ends, then cancels what is left and
// waits at most Options.StopTimeout more; then it closes every session's
// shell and every scope. It returns within ctx's grace plus StopTimeout
// even when a turn ignores its cancellation (ErrWedged).
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdownMu.Lock()
	defer s.shutdownMu.Unlock()
	s.mu.Lock()
	s.shutting = true
	s.mu.Unlock()
	s.turnQ.Close()
	s.reqs.Close()
	done := make(chan struct{})
	go func() { s.turns.Wait(); close(done) }() // ends when the last turn does
	var wedged error
	select {
	case <-done:
	case <-ctx.Done():
		s.cancelAll()
		stop := time.NewTimer(s.opts.StopTimeout)
		select {
		case <-done:
		case <-stop.C:
			wedged = fmt.Errorf("%w: %d turns did not stop within %s of being cancelled", ErrWedged, s.running.Load(), s.opts.StopTimeout)
			s.log.Error("shutdown: giving up on wedged turns", "turns", s.running.Load())
		}
		stop.Stop()
	}
	s.cancelAll()
	s.mu.Lock()
	sessions := make([]*Session, 0, len(s.sessions))
	for _, sess := range s.sessions {
		sessions = append(sessions, sess)
	}
	s.sessions = map[string]*Session{}
	s.mu.Unlock()
	closeSessions(sessions, EndServerStop)
	s.mu.Lock()
	shared := s.shared
	s.mu.Unlock()
	if shared != nil {
		_ = shared.Close()
	}
	return errors.Join(wedged, s.pool.Close())
}

// DropConn closes the sessions owned by a connection that has gone.
func (s *Server) DropConn(connID string) {
	s.mu.Lock()
	delete(s.conns, connID)
	var gone []*Session
	for id, sess := range s.sessions {
		if sess.conn != nil && sess.conn.ID() == connID {
			gone = append(gone, sess)
			delete(s.sessions, id)
		}
	}
	s.mu.Unlock()
	closeSessions(gone, EndDisconnected)
}

// closeSessions ends sessions a few at a time: a close waits for its
// shell's processes to go, and a flooding connection may hold hundreds.
func closeSessions(list []*Session, reason string) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, sess := range list {
		wg.Add(1)
		sem <- struct{}{}
		go func() { // ends with the close
			defer wg.Done()
			defer func() { <-sem }()
			sess.close(reason)
		}()
	}
	wg.Wait()
}

// Register adds the protocol's methods to d.
func (s *Server) Register(d *rpc.Dispatcher) {
	if s.reqs != nil {
		d.SetAdmit(s.Admit)
		d.SetRefusalDelay(s.limits.RefusalDelay)
	}
	d.Handle("session.create", s.sessionCreate)
	d.Handle("session.resume", s.sessionResume)
	d.Handle("session.close", s.sessionClose)
	d.Handle("prompt.submit", s.promptSubmit)
	d.Handle("config.set", s.configSet)
	d.Handle("model.save_key", s.modelSaveKey)
	d.Handle("profiles.create", s.profilesCreate)
	d.Handle("profiles.delete", s.profilesDelete)
	d.Handle("profiles.list", s.profilesList)
	d.Handle("cron.create", s.cronCreate)
	d.Handle("cron.trigger", s.cronTrigger)
	d.Handle("cron.list", s.cronList)
}

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
	snap, err := sc.Load()
	if err != nil {
		sc.Log.Error("load config", "err", err)
		return nil, internalError("load profile %q: %v", sc.Profile.Name, err)
	}
	s.mu.Lock()
	full := s.tooManySessions(sc.Profile.Name)
	s.mu.Unlock()
	if full != nil {
		return nil, full
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
	if err := c.Bind(&p); err != nil {
		return nil, err
	}
	sc, release, err := s.callerScope(ctx, c, p.Profile)
	if err != nil {
		return nil, err
	}
	defer release()
	return s.openSession(ctx, c, sc, "")
}

func (s *Server) sessionResume(ctx context.Context, c *rpc.Call) (any, error) {
	var p struct {
		SessionID string `json:"session_id"`
		Profile   string `json:"profile"`
	}
	if err := c.Bind(&p); err != nil {
		return nil, err
	}
	if p.SessionID == "" {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "session.resume: session_id (a stored session id) is required")
	}
	sc, release, err := s.callerScope(ctx, c, p.Profile)
	if err != nil {
		return nil, err
	}
	defer release()
	sc = s.resumeScopeFault(ctx, sc, p.SessionID)
	return s.openSession(ctx, c, sc, p.SessionID)
}

func (s *Server) sessionClose(ctx context.Context, c *rpc.Call) (any, error) {
	var p struct {
		SessionID string `json:"session_id"`
	}
	if err := c.Bind(&p); err != nil {
		return nil, err
	}
	sess, err := s.ownedSession(c, p.SessionID)
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
	if err := c.Bind(&p); err != nil {
		return nil, err
	}
	sess, err := s.ownedSession(c, p.SessionID)
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
	ticket, err := s.turnQ.Enqueue(sess.Scope.Profile.Name, c.Conn.ID())
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
		Client:        sc.Client(snap),
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
		Emit: emit,
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

// Detached describes a turn that belongs to no connection: a cron job or a
// gateway request.
type Detached struct {
	Profile string        // profile name ("" = launch)
	Source  string        // recorded on the stored session: "cron", "gateway"
	Title   string        // stored session title
	History []llm.Message // earlier messages, stored before the turn
	Text    string        // the user's message
	// Sink receives the turn events; nil drops them.
	Sink func(typ string, payload any)
	// Member names who asked, for fair turns inside the profile (a gateway
	// client's address, say); Source when empty.
	Member string
	// OnStart, when set, runs once the turn holds its slot, before its
	// first event; an error returned before it ran means no turn started.
	OnStart func()
}

// ErrShuttingDown is returned for work refused because the server stops.
var ErrShuttingDown = errors.New("agentd is shutting down")

// RunDetached plays one turn in a fresh session of its own, in the named
// profile's scope, and returns the answer. Shutdown waits for it (and
// cancels it after the grace period) like any other turn.
func (s *Server) RunDetached(ctx context.Context, d Detached) (string, error) {
	s.mu.Lock()
	if s.shutting {
		s.mu.Unlock()
		return "", ErrShuttingDown
	}
	s.turns.Add(1)
	s.mu.Unlock()
	defer s.turns.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.baseCtx, cancel)
	defer stop()

	if err := profile.ValidName(d.Profile); d.Profile != "" && err != nil {
		return "", err
	}
	sc, release, err := s.pool.Use(ctx, d.Profile)
	if err != nil {
		return "", err
	}
	defer release()
	stopOnDelete := context.AfterFunc(sc.Context(), cancel) // a delete of the profile ends the turn
	defer stopOnDelete()
	member := d.Member
	if member == "" {
		member = d.Source
	}
	ticket, err := s.turnQ.Enqueue(sc.Profile.Name, member)
	if err != nil {
		if errors.Is(err, fair.ErrClosed) {
			return "", ErrShuttingDown
		}
		return "", fmt.Errorf("%w: %v; retry after %s", ErrTooBusy, err, s.limits.RetryAfter)
	}
	defer ticket.Release()
	if err := ticket.Wait(ctx); err != nil {
		if errors.Is(err, fair.ErrClosed) || s.baseCtx.Err() != nil {
			return "", ErrShuttingDown
		}
		return "", fmt.Errorf("turn not started: %w", err)
	}
	if d.OnStart != nil {
		d.OnStart()
	}
	snap, err := sc.Load()
	if err != nil {
		return "", err
	}
	st, err := sc.DB.CreateSession(ctx, store.Session{Profile: sc.Profile.Name, Model: snap.Config.Model.Default, Title: d.Title, Source: d.Source})
	if err != nil {
		return "", err
	}
	for _, m := range d.History {
		if err := sc.DB.Append(ctx, st.ID, toStored(m)); err != nil {
			return "", err
		}
	}
	sess := &Session{ID: s.liveID(), Stored: st.ID, Scope: sc, sink: d.Sink, history: append([]llm.Message(nil), d.History...), busy: true,
		sandboxFor: func(cwd string) (*sandbox.Policy, error) { return s.shellSandbox(sc, cwd) }}
	s.seedSessionFaults(sess)
	// Registered (with no owner connection, so no request can address it)
	// for the nested calls of its turn's plugin tools.
	s.mu.Lock()
	if s.pool.Deleting(sc.Profile.Name) {
		s.mu.Unlock()
		return "", fmt.Errorf("%w %q: it is being deleted", profile.ErrUnknownProfile, sc.Profile.Name)
	}
	s.sessions[sess.ID] = sess
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.sessions, sess.ID)
		s.mu.Unlock()
		sess.close(EndDetachedDone)
	}()
	sess.start(ctx, s.toolsOf(sc), map[string]any{"resumed": false, "source": d.Source})
	sc.Log.Info("detached turn start", "source", d.Source, "title", d.Title, "session", sess.ID)
	return s.runTurn(ctx, sess, d.Text, ticket)
}

// RunJob implements cron.Runner: the job runs as a turn in a session of
// its own in profile p's scope.
func (s *Server) RunJob(ctx context.Context, p profile.Profile, job cron.Job) (string, error) {
	name := p.Name
	if s.opts.Faults.Has(faults.CronLaunchScope) {
		name = profile.LaunchName // the bug: every job runs in the launch scope
	}
	answer, err := s.RunDetached(ctx, Detached{Profile: name, Source: "cron", Title: "cron: " + job.Name, Text: job.Prompt})
	if err != nil {
		return "", fmt.Errorf("cron job %s: %w", job.ID, err)
	}
	return answer, nil
}

// TickCron fires the due jobs of every profile once.
func (s *Server) TickCron(ctx context.Context, now time.Time) ([]cron.Result, error) {
	profiles, err := s.opts.Homes.List()
	if err != nil {
		return nil, err
	}
	var out []cron.Result
	for _, p := range profiles {
		out = append(out, s.TickProfile(ctx, p.Name, now)...)
	}
	return out, nil
}

// TickProfile fires the due jobs of one profile, holding its scope for the
// whole tick: a delete of the profile waits for the tick (and cancels its
// turns), and a tick never writes in a home that was deleted meanwhile.
// A profile deleted before the tick has no jobs.
func (s *Server) TickProfile(ctx context.Context, name string, now time.Time) []cron.Result {
	sc, release, err := s.pool.Use(ctx, name)
	if errors.Is(err, profile.ErrUnknownProfile) {
		return nil
	}
	if err != nil {
		return []cron.Result{{Profile: name, Err: err}}
	}
	defer release()
	return cron.Tick(ctx, []profile.Profile{sc.Profile}, now, s)
}

func (s *Server) configSet(ctx context.Context, c *rpc.Call) (any, error) {
	var p struct {
		Key       string `json:"key"`
		Value     any    `json:"value"`
		SessionID string `json:"session_id"`
		Profile   string `json:"profile"`
	}
	if err := c.Bind(&p); err != nil {
		return nil, err
	}
	keys := map[string]string{"cwd": "terminal.cwd", "prompt": "custom_prompt", "model": "model.default"}
	full, ok := keys[p.Key]
	if !ok {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "config.set: unknown key %q (want cwd, prompt or model)", p.Key)
	}
	value, ok := p.Value.(string)
	if !ok {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "config.set: value of %s must be a string", p.Key)
	}
	switch p.Key {
	case "cwd":
		if !filepath.IsAbs(value) {
			return nil, rpc.Errorf(rpc.CodeInvalidParams, "config.set: cwd %q is not an absolute path", value)
		}
		if st, err := os.Stat(value); err != nil || !st.IsDir() {
			return nil, rpc.Errorf(rpc.CodeInvalidParams, "config.set: cwd %q is not a directory", value)
		}
	case "model":
		if value == "" {
			return nil, rpc.Errorf(rpc.CodeInvalidParams, "config.set: model is empty")
		}
	}
	sc, release, err := s.target(ctx, c, p.SessionID, p.Profile)
	if err != nil {
		return nil, err
	}
	defer release()
	if p.Key == "cwd" {
		if err := s.checkCwd(sc, value); err != nil {
			return nil, err
		}
	}
	if p.Profile != "" && s.opts.Faults.Has(faults.WrongWriteScope) {
		launch, releaseLaunch, err := s.scopeFor(ctx, "") // the bug: the launch profile's file
		if err != nil {
			return nil, err
		}
		defer releaseLaunch()
		sc = launch
	}
	if p.Key == "cwd" && s.opts.Faults.Has(faults.GlobalCwd) {
		_ = os.Chdir(value) // the bug: a process-wide working directory
	}
	if err := sc.Profile.SetConfig(full, value); err != nil {
		return nil, internalError("config.set: %v", err)
	}
	sc.Log.Info("config set", "key", full)
	return map[string]any{"ok": true, "profile": sc.Profile.Name, "key": full}, nil
}

func (s *Server) modelSaveKey(ctx context.Context, c *rpc.Call) (any, error) {
	var p struct {
		Slug      string `json:"slug"`
		APIKey    string `json:"api_key"`
		SessionID string `json:"session_id"`
		Profile   string `json:"profile"`
	}
	if err := c.Bind(&p); err != nil {
		return nil, err
	}
	if err := profile.ValidSlug(p.Slug); err != nil && !s.opts.Faults.Has(faults.TenantTextAsPath) {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "model.save_key: %v", err)
	}
	if p.APIKey == "" {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "model.save_key: api_key is empty")
	}
	sc, release, err := s.target(ctx, c, p.SessionID, p.Profile)
	if err != nil {
		return nil, err
	}
	defer release()
	if file, bad, err := s.slugKeyFileFault(sc, p.Slug, p.APIKey); err != nil {
		return nil, internalError("model.save_key: %v", err)
	} else if bad {
		return map[string]any{"ok": true, "profile": sc.Profile.Name, "file": file}, nil
	}
	name := upper(p.Slug) + "_API_KEY"
	if err := sc.Profile.SetEnv(name, p.APIKey); err != nil {
		return nil, internalError("model.save_key: %v", err)
	}
	s.saveKeyFault(ctx, name, p.APIKey)
	sc.Log.Info("key saved", "env", name, "key", scope.Fingerprint(p.APIKey))
	return map[string]any{"ok": true, "profile": sc.Profile.Name, "env": name}, nil
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

func (s *Server) cronCreate(ctx context.Context, c *rpc.Call) (any, error) {
	var p struct {
		Profile string `json:"profile"`
		Name    string `json:"name"`
		Prompt  string `json:"prompt"`
		Every   string `json:"every"`
	}
	if err := c.Bind(&p); err != nil {
		return nil, err
	}
	if p.Prompt == "" || p.Every == "" {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "cron.create: prompt and every are required")
	}
	if _, err := cron.ParseEvery(p.Every); err != nil {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "cron.create: %v", err)
	}
	sc, release, err := s.callerScope(ctx, c, p.Profile)
	if err != nil {
		return nil, err
	}
	defer release()
	job, err := cron.ForProfile(sc.Profile).Create(p.Name, p.Prompt, p.Every, time.Now())
	if err != nil {
		return nil, internalError("cron.create: %v", err)
	}
	sc.Log.Info("cron job created", "job", job.ID)
	return map[string]any{"ok": true, "profile": sc.Profile.Name, "job": job}, nil
}

func (s *Server) cronTrigger(ctx context.Context, c *rpc.Call) (any, error) {
	var p struct {
		Profile string `json:"profile"`
		ID      string `json:"id"`
	}
	if err := c.Bind(&p); err != nil {
		return nil, err
	}
	if p.ID == "" {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "cron.trigger: id is required")
	}
	sc, release, err := s.callerScope(ctx, c, p.Profile)
	if err != nil {
		return nil, err
	}
	defer release()
	job, err := cron.ForProfile(sc.Profile).Trigger(p.ID, time.Now())
	if errors.Is(err, cron.ErrUnknownJob) {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "cron.trigger: unknown job %q in profile %q", p.ID, sc.Profile.Name)
	}
	if err != nil {
		return nil, internalError("cron.trigger: %v", err)
	}
	return map[string]any{"ok": true, "profile": sc.Profile.Name, "job": job}, nil
}

func (s *Server) cronList(ctx context.Context, c *rpc.Call) (any, error) {
	var p struct {
		Profile string `json:"profile"`
	}
	if err := c.Bind(&p); err != nil {
		return nil, err
	}
	sc, release, err := s.callerScope(ctx, c, p.Profile)
	if err != nil {
		return nil, err
	}
	defer release()
	jobs, err := cron.ForProfile(sc.Profile).List()
	if err != nil {
		return nil, internalError("cron.list: %v", err)
	}
	return map[string]any{"profile": sc.Profile.Name, "jobs": jobs}, nil
}

// launchModel is the launch profile's model (the model-bleed fault).
func (s *Server) launchModel() string {
	sc, err := s.pool.Get(context.Background(), "")
	if err != nil {
		return ""
	}
	snap, err := sc.Load()
	if err != nil {
		return ""
	}
	return snap.Config.Model.Default
}

// seedSessionFaults wires the seeded faults that act on a live session
// (test-only; see package faults).
func (s *Server) seedSessionFaults(sess *Session) {
	if s.opts.Faults.Has(faults.BroadcastEvents) {
		sess.broadcast = func(frame []byte) {
			s.mu.Lock()
			conns := make([]rpc.Conn, 0, len(s.conns))
			for _, c := range s.conns {
				conns = append(conns, c)
			}
			s.mu.Unlock()
			for _, c := range conns {
				_ = c.Send(frame)
			}
		}
	}
	if s.opts.Faults.Has(faults.SharedShell) {
		sess.sharedShell = func(opts terminal.Options) *terminal.Shell {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.shared == nil {
				s.shared = terminal.New(opts)
			}
			return s.shared
		}
	}
	if s.opts.Faults.Has(faults.GlobalCwd) {
		sess.processCwd = true
	}
}

// ErrUnknownSession is returned by DispatchTool for a session that is not live.
var ErrUnknownSession = errors.New("unknown live session")

// ErrUnknownTool is returned by DispatchTool for a tool the session's
// profile does not offer.
var ErrUnknownTool = errors.New("unknown tool")

// DispatchTool runs one of the tools offered in a live session's turns as
// that session: in its profile's scope, with its shell. It is how a
// plugin's nested call (plugin -> ctx.DispatchTool -> server) comes back
// into the server as the session that made the outer call.
func (s *Server) DispatchTool(ctx context.Context, sessionID, tool string, args map[string]any) (string, error) {
	s.mu.Lock()
	sess := s.sessions[sessionID]
	s.mu.Unlock()
	if sess == nil {
		return "", fmt.Errorf("dispatch %s: %w %q", tool, ErrUnknownSession, sessionID)
	}
	sc := sess.Scope
	snap, err := sc.Load()
	if err != nil {
		return "", fmt.Errorf("dispatch %s: %w", tool, err)
	}
	t, ok := s.toolsOf(sc).Get(tool)
	if !ok {
		return "", fmt.Errorf("dispatch: %w %q in profile %q", ErrUnknownTool, tool, sc.Profile.Name)
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return "", fmt.Errorf("dispatch %s: encode arguments: %w", tool, err)
	}
	if args == nil {
		raw = []byte("{}")
	}
	return t.Call(ctx, &agent.Env{
		Session: sess.ID, Stored: sess.Stored, Profile: sc.Profile.Name, Home: sc.Profile.Home,
		Shell: func(ctx context.Context) (*terminal.Shell, error) { return sess.shellFor(ctx, snap) },
	}, raw)
}

// Facade serves a plugin's facade call as the live session: "state" get
// and set (a key-value store of the session) and "llm" complete (one
// answer from the session's profile's own provider and model, no tools).
func (s *Server) Facade(ctx context.Context, sessionID, facade, method string, args []string) (string, error) {
	s.mu.Lock()
	sess := s.sessions[sessionID]
	s.mu.Unlock()
	if sess == nil {
		return "", fmt.Errorf("facade %s.%s: %w %q", facade, method, ErrUnknownSession, sessionID)
	}
	need := func(n int) error {
		if len(args) < n {
			return fmt.Errorf("facade %s.%s: want %d arguments, got %d", facade, method, n, len(args))
		}
		return nil
	}
	switch facade + "." + method {
	case "state.get":
		if err := need(1); err != nil {
			return "", err
		}
		var v string
		s.pluginState(sess, func(state map[string]string) { v = state[args[0]] })
		return v, nil
	case "state.set":
		if err := need(2); err != nil {
			return "", err
		}
		s.pluginState(sess, func(state map[string]string) { state[args[0]] = args[1] })
		return "", nil
	case "llm.complete":
		if err := need(1); err != nil {
			return "", err
		}
		sc := s.facadeScope(ctx, sess.Scope)
		snap, err := sc.Load()
		if err != nil {
			return "", fmt.Errorf("facade llm.complete: %w", err)
		}
		client, err := s.toolsOf(sc).ModelClient(ctx, sess.hookEnv(), sc.Client(snap))
		if err != nil {
			return "", fmt.Errorf("facade llm.complete: %w", err)
		}
		resp, err := client.Stream(ctx, llm.Request{Model: snap.Config.Model.Default,
			Messages: []llm.Message{{Role: "user", Content: args[0]}}}, nil)
		if err != nil {
			return "", fmt.Errorf("facade llm.complete: %w", err)
		}
		return resp.Message.Content, nil
	}
	return "", fmt.Errorf("facade %s.%s: %w", facade, method, host.ErrUnsupported)
}
