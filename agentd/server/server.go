package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenantcanary/tenantcanary/agentd/agent"
	"github.com/tenantcanary/tenantcanary/agentd/cluster"
	"github.com/tenantcanary/tenantcanary/agentd/fair"
	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/rpc"
	"github.com/tenantcanary/tenantcanary/agentd/scope"
	"github.com/tenantcanary/tenantcanary/agentd/terminal"
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
	// Cluster, when set, is cluster mode: state in its PostgreSQL, routing,
	// events, shares and caches in its Redis (package cluster). The server
	// does not close it.
	Cluster *cluster.Cluster
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
	revoked    map[string]string   // tenant connections whose credential lapsed: why (see checkCredential)
	keys       keyCache            // the profiles' tenant keys, by their .env's identity
	revoking   sync.WaitGroup      // revocations a turn started (revokeLater)
	shared     *terminal.Shell     // the shared-shell fault's one shell
	replay     replayCache         // the request-replay-cache fault's replies

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
		opts: opts, pool: scope.NewPool(opts.Homes, opts.BaseEnv, opts.Faults), log: opts.Log, conns: map[string]rpc.Conn{}, revoked: map[string]string{},
		baseCtx: ctx, cancelAll: cancel, sessions: map[string]*Session{}, registry: reg,
	}
	s.pool.SetLog(opts.Log)
	s.clusterInit()
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

// OpenScopes are the profiles' scopes open now: what a reload of their
// plugins (SIGHUP to agentd serve) acts on.
func (s *Server) OpenScopes() []*scope.Scope { return s.pool.Open() }

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
	s.revoking.Wait() // shutting is set: none starts now
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
	delete(s.revoked, connID)
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
	for method, h := range map[string]rpc.Handler{
		"session.create": s.sessionCreate, "session.resume": s.sessionResume, "session.close": s.sessionClose,
		"prompt.submit": s.promptSubmit,
		"config.set":    s.configSet, "model.save_key": s.modelSaveKey,
		"profiles.create": s.profilesCreate, "profiles.delete": s.profilesDelete, "profiles.list": s.profilesList,
		"profiles.rotate_key": s.profilesRotateKey,
		"cron.create":         s.cronCreate, "cron.trigger": s.cronTrigger, "cron.list": s.cronList,
	} {
		d.Handle(method, s.replayed(s.gated(h))) // a tenant connection's credential, checked at every call
	}
}
