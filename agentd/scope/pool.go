package scope

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/store"
)

// Pool opens scopes on first use and keeps them until dropped. It is also
// where a profile's deletion is made atomic (Delete): work in flight holds
// a use of the scope (Use), and the home goes only when none is left.
type Pool struct {
	homes   profile.Homes
	baseEnv []string
	faults  faults.Set

	// Set before the first Get (see SetLog, TrustLaunchOperatorKeys).
	log         *slog.Logger
	trustLaunch bool
	state       StateOpener // nil: each profile's own state.db

	mu        sync.Mutex
	scopes    map[string]*Scope
	deleting  map[string]*deletion
	closed    bool
	done      chan struct{}     // closed by Close
	credCache map[string]string // the shared-credential fault's cache
}

// deletion is one profile's deletion under way.
type deletion struct {
	done chan struct{} // closed when it ended
	err  error
}

// ErrClosed is returned by Get after Close.
var ErrClosed = errors.New("scope pool closed")

// NewPool returns a pool over homes; baseEnv is agentd's own environment,
// scrubbed before any of it reaches a tool subprocess. fs are seeded
// faults (nil in production).
func NewPool(homes profile.Homes, baseEnv []string, fs faults.Set) *Pool {
	return &Pool{homes: homes, baseEnv: append([]string(nil), baseEnv...), faults: fs, scopes: map[string]*Scope{},
		deleting: map[string]*deletion{}, done: make(chan struct{}), credCache: map[string]string{}}
}

// SetLog names the server's own log: where an operator-only key that a
// profile's own config set, and that was ignored, is reported (else the
// profile's log). Call it before the first Get.
func (p *Pool) SetLog(log *slog.Logger) { p.log = log }

// TrustLaunchOperatorKeys lets the launch profile's own config.yaml set
// the operator-only keys (profile.OperatorOnly): for a single-tenant
// server (agentd tui), whose launch home is its operator's own. Call it
// before the first Get.
func (p *Pool) TrustLaunchOperatorKeys() { p.trustLaunch = true }

// StateOpener opens a profile's state (store.State) where it is not the
// profile's own state.db: cluster mode keeps every profile's sessions in
// a shared PostgreSQL database, each profile's rows apart.
type StateOpener func(ctx context.Context, p profile.Profile) (store.State, error)

// SetState opens every scope's state with open instead of the profile's
// state.db. Call it before the first Get.
func (p *Pool) SetState(open StateOpener) { p.state = open }

// Homes is the pool's homes.
func (p *Pool) Homes() profile.Homes { return p.homes }

// Get returns the named profile's scope ("" is the launch profile),
// opening it if needed. A profile whose home is gone, or that is being
// deleted, is reported unknown (profile.ErrUnknownProfile). Work that
// writes in the profile's home takes a Use instead, so that a deletion
// waits for it.
func (p *Pool) Get(ctx context.Context, name string) (*Scope, error) {
	s, _, err := p.get(ctx, name, false)
	return s, err
}

// Use is Get for one piece of work: the scope stays the profile's (its
// deletion waits) until release is called. release is safe to call twice.
func (p *Pool) Use(ctx context.Context, name string) (s *Scope, release func(), err error) {
	return p.get(ctx, name, true)
}

func (p *Pool) get(ctx context.Context, name string, use bool) (*Scope, func(), error) {
	if name == "" {
		name = profile.LaunchName
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, nil, ErrClosed
	}
	if p.deleting[name] != nil {
		p.mu.Unlock()
		return nil, nil, fmt.Errorf("%w %q: it is being deleted", profile.ErrUnknownProfile, name)
	}
	// The home is looked up under the lock: a deletion renames it aside
	// under the same lock, so a scope is never opened (nor its home
	// re-made) after the home went.
	prof, err := p.homes.Get(name)
	if err != nil {
		gone := p.scopes[name]
		delete(p.scopes, name)
		p.mu.Unlock()
		if gone != nil {
			_ = gone.Close()
		}
		return nil, nil, err
	}
	s, err := p.getLocked(ctx, prof)
	if err != nil {
		p.mu.Unlock()
		return nil, nil, err
	}
	if !use {
		p.mu.Unlock()
		return s, func() {}, nil
	}
	s.uses++
	p.mu.Unlock()
	return s, sync.OnceFunc(func() { p.release(s) }), nil
}

func (p *Pool) release(s *Scope) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s.uses--
	if s.uses == 0 && s.drained != nil {
		close(s.drained)
		s.drained = nil
	}
}

func (p *Pool) getLocked(ctx context.Context, prof profile.Profile) (*Scope, error) {
	if p.closed {
		return nil, ErrClosed
	}
	if s, ok := p.scopes[prof.Name]; ok {
		return s, nil
	}
	// A profile's own config may set the operator's keys only where its
	// home is the operator's own (or under the seeded fault).
	prof.OwnOperatorKeys = (p.trustLaunch && prof.Name == profile.LaunchName) || p.faults.Has(faults.TenantOperatorSettings)
	var shared store.State
	if p.faults.Has(faults.SharedStateDB) && prof.Name != profile.LaunchName {
		// The bug: every profile's sessions go into the launch state.db.
		launchProf, err := p.homes.Get("")
		if err != nil {
			return nil, err
		}
		launch, err := p.getLocked(ctx, launchProf)
		if err != nil {
			return nil, err
		}
		shared = launch.DB
	}
	s, err := open(ctx, prof, p.baseEnv, shared, p.state)
	if err != nil {
		return nil, err
	}
	s.pool, s.faults, s.opLog = p, p.faults, p.log
	p.scopes[prof.Name] = s
	return s, nil
}

// Deleting reports whether the named profile's deletion is under way.
func (p *Pool) Deleting(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.deleting[name] != nil
}

// Delete deletes a named profile, atomically for every request:
//  1. its new requests are refused: Get and Use answer
//     profile.ErrUnknownProfile from now on, and its scope's Context ends;
//  2. end runs (the server ends the profile's sessions there);
//  3. the work in flight drains: every Use is released;
//  4. under the pool's lock the home is renamed aside
//     (profile.Homes.SetAside) and the scope forgotten, so a profile
//     created under the name from then on gets a fresh home and scope;
//  5. the scope closes (its store and log), and the renamed folder is
//     removed.
//
// The deletion goes on when ctx ends (Delete then returns ctx's error); a
// second Delete of the name meanwhile waits for the first and gets its
// result. An unknown profile is profile.ErrUnknownProfile.
func (p *Pool) Delete(ctx context.Context, name string, end func()) error {
	if name == "" || name == profile.LaunchName {
		return fmt.Errorf("delete profile %q: the launch profile cannot be deleted: %w", name, profile.ErrBadName)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	d := p.deleting[name]
	if d == nil {
		if _, err := p.homes.Get(name); err != nil {
			p.mu.Unlock()
			return fmt.Errorf("delete profile: %w", err)
		}
		d = &deletion{done: make(chan struct{})}
		p.deleting[name] = d
		s := p.scopes[name]
		if s != nil {
			s.cancel()
		}
		go p.finishDelete(name, d, s, end) // ends when the profile's work has drained
	}
	p.mu.Unlock()
	select {
	case <-d.done:
		return d.err
	case <-ctx.Done():
		return fmt.Errorf("delete profile %q: still draining its work (the deletion goes on): %w", name, ctx.Err())
	}
}

// finishDelete is Delete's steps 2 to 5.
func (p *Pool) finishDelete(name string, d *deletion, s *Scope, end func()) {
	if end != nil {
		end()
	}
	if s != nil {
		p.mu.Lock()
		var drained chan struct{}
		if s.uses > 0 {
			if s.drained == nil {
				s.drained = make(chan struct{})
			}
			drained = s.drained
		}
		p.mu.Unlock()
		if drained != nil {
			select {
			case <-drained:
			case <-p.done: // the server stops: Close closed the scope
			}
		}
	}
	p.mu.Lock()
	aside, err := p.homes.SetAside(name)
	if p.scopes[name] == s {
		delete(p.scopes, name)
	}
	delete(p.deleting, name)
	p.mu.Unlock()
	if s != nil {
		if cerr := s.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("delete profile %q: close its scope: %w", name, cerr)
		}
	}
	if aside != "" {
		if rerr := p.homes.RemoveAside(aside); rerr != nil && err == nil {
			err = rerr
		}
	}
	d.err = err
	close(d.done)
}

// Drop closes and forgets a profile's scope at once, in use or not (the
// delete-race fault's delete; Delete is the atomic one).
func (p *Pool) Drop(name string) {
	p.mu.Lock()
	s := p.scopes[name]
	delete(p.scopes, name)
	p.mu.Unlock()
	if s != nil {
		_ = s.Close()
	}
}

// Open returns the scopes open now (a reload acts on each).
func (p *Pool) Open() []*Scope {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*Scope, 0, len(p.scopes))
	for _, s := range p.scopes {
		out = append(out, s)
	}
	return out
}

// Close closes every scope, side by side: each stops its own terminals
// and plugin hosts, and a host may take its stop grace to go, so the
// server's stop lasts as long as its slowest profile's, not their sum.
func (p *Pool) Close() error {
	p.mu.Lock()
	if !p.closed {
		close(p.done)
	}
	p.closed = true
	scopes := p.scopes
	p.scopes = map[string]*Scope{}
	p.mu.Unlock()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, s := range scopes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Close(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// homeExists reports whether dir is a folder (not a link to one).
func homeExists(dir string) bool {
	st, err := os.Lstat(dir)
	return err == nil && st.IsDir()
}
