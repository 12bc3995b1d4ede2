package stores

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"

	"github.com/tenantcanary/tenantcanary/harness/slowproxy"
	"github.com/tenantcanary/tenantcanary/internal/storeproc"
)

// Store is one shared store of a run: started by the harness (a local
// run) or reached by its URL (staging).
type Store struct {
	Spec Spec
	// URL is what the target and the scan connect with.
	URL string

	srv   *storeproc.Server // nil: a store the harness did not start
	proxy *slowproxy.Proxy  // nil: the target reaches the store itself (Set.Proxy)
}

// Proxy is the delaying proxy the target reaches the store through (see
// Set.Proxy), nil when it reaches the store itself.
func (s *Store) Proxy() *slowproxy.Proxy { return s.proxy }

// TargetURL is the URL the target is handed: URL, or with a proxy in
// front of the store, URL with the proxy's address in its host's place.
// The harness's own scans use URL.
func (s *Store) TargetURL() string {
	if s.proxy == nil {
		return s.URL
	}
	u, err := url.Parse(s.URL)
	if err != nil {
		return s.URL // Validate parsed it: not reached
	}
	u.Host = s.proxy.Addr()
	return u.String()
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
			srv, err := storeproc.Start(ctx, sp.Kind, dir)
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

// Vars are the stores' placeholders (Spec.Placeholder) and the URLs the
// target is handed (TargetURL), to fill the target's command lines and
// env values with.
func (s *Set) Vars() map[string]string {
	out := map[string]string{}
	for _, st := range s.Stores() {
		out[st.Spec.Placeholder()] = st.TargetURL()
	}
	return out
}

// Proxy puts a delaying proxy (package slowproxy, started with opts, no
// delay until one is set; each with a random source of its own drawn from
// opts.Rand) in front of every store of the set that has none yet: from then on Vars hands the target the proxies' addresses,
// while the harness's scans still reach the stores themselves. Close
// stops the proxies. On error the proxies it started are closed again.
func (s *Set) Proxy(opts slowproxy.Options) error {
	var started []*Store
	undo := func(err error) error {
		for _, o := range started {
			_ = o.proxy.Close()
			o.proxy = nil
		}
		return err
	}
	for _, st := range s.Stores() {
		if st.proxy != nil {
			continue
		}
		u, err := url.Parse(st.URL)
		if err != nil || u.Host == "" {
			return undo(fmt.Errorf("stores: proxy the %s store at %s: no host:port in its URL", st.Spec.Kind, st.Name()))
		}
		o := opts
		if opts.Rand != nil {
			// A proxy draws from its Rand under its own lock: each gets a
			// source of its own, drawn from the one given.
			o.Rand = rand.New(rand.NewPCG(opts.Rand.Uint64(), opts.Rand.Uint64()))
		}
		p, err := slowproxy.Start(u.Host, o)
		if err != nil {
			return undo(fmt.Errorf("stores: proxy the %s store at %s: %w", st.Spec.Kind, st.Name(), err))
		}
		st.proxy = p
		started = append(started, st)
	}
	return nil
}

// Close stops every proxy and every store the harness started and waits
// for their goroutines and processes; it is safe to call twice and on a
// nil Set.
func (s *Set) Close() error {
	var errs []error
	for _, st := range s.Stores() {
		if st.proxy != nil {
			if err := st.proxy.Close(); err != nil {
				errs = append(errs, fmt.Errorf("stop the %s store's proxy: %w", st.Spec.Kind, err))
			}
		}
	}
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
