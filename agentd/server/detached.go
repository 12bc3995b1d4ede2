package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/tenantcanary/tenantcanary/agentd/fair"
	"github.com/tenantcanary/tenantcanary/agentd/llm"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
	"github.com/tenantcanary/tenantcanary/agentd/store"
)

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
	ticket, err := s.turnQ.Enqueue(s.turnGroup(sc.Profile.Name, member), member)
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
