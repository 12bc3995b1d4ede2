package stores

import (
	"context"
	"errors"
	"fmt"

	"github.com/tenantcanary/tenantcanary/internal/storeproc"
)

// Store is one shared store of a run: started by the harness (a local
// run) or reached by its URL (staging).
type Store struct {
	Spec Spec
	// URL is what the target and the scan connect with.
	URL string

	srv *storeproc.Server // nil: a store the harness did not start
}

// Started reports whether the harness started the store (and stops it).
func (s *Store) Started() bool { return s.srv != nil }

// Pid is the started server's process id, 0 for a store the harness did
// not start or has stopped.
func (s *Store) Pid() int {
	if s.srv == nil {
		return 0
	}
	return s.srv.Pid()
}

// Restart stops the started server and starts it again on the same data
// and port; a store the harness did not start cannot be restarted.
func (s *Store) Restart(ctx context.Context) error {
	if s.srv == nil {
		return fmt.Errorf("restart the %s store at %s: the harness did not start it", s.Spec.Kind, redact(s.URL))
	}
	return s.srv.Restart(ctx)
}

// Name is how findings and messages name the store: its URL, its
// password hidden.
func (s *Store) Name() string { return redact(s.URL) }

// Set is the stores of one run.
type Set struct {
	stores []*Store
}

// Open starts every store of specs that gives no URL (a private folder
// below dir, a loopback port: storeproc) and takes the URL of every other.
// On error, what it started is stopped again. A nil or empty specs gives an
// empty Set.
func Open(ctx context.Context, specs []Spec, dir string) (*Set, error) {
	if err := Validate(specs); err != nil {
		return nil, fmt.Errorf("stores: %w", err)
	}
	set := &Set{}
	for i, sp := range specs {
		st := &Store{Spec: sp, URL: sp.URL}
		if sp.URL == "" {
			srv, err := storeproc.Start(ctx, storeproc.Kind(sp.Kind), dir)
			if err != nil {
				err = fmt.Errorf("stores[%d]: %w", i, err)
				return nil, errors.Join(err, set.Close())
			}
			st.srv, st.URL = srv, srv.URL
		}
		set.stores = append(set.stores, st)
	}
	return set, nil
}

// Stores lists the run's stores in the target file's order.
func (s *Set) Stores() []*Store {
	if s == nil {
		return nil
	}
	return append([]*Store(nil), s.stores...)
}

// Vars are the stores' placeholders (Spec.Placeholder) and their URLs,
// to fill the target's command lines and env values with.
func (s *Set) Vars() map[string]string {
	out := map[string]string{}
	for _, st := range s.Stores() {
		out[st.Spec.Placeholder()] = st.URL
	}
	return out
}

// Close stops every store the harness started and waits for its
// processes; it is safe to call twice and on a nil Set.
func (s *Set) Close() error {
	var errs []error
	for _, st := range s.Stores() {
		if st.srv == nil {
			continue
		}
		if err := st.srv.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop the %s store: %w", st.Spec.Kind, err))
		}
	}
	return errors.Join(errs...)
}
