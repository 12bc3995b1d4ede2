package scenarios

import (
	"maps"
	"sync"
)

// stateKey names one piece of a scenario's per-run state, of type T. The
// state lives in the run's Env, so two runs of one spec at once (the
// self-test's clean and faulty runs) keep theirs apart, and a scenario's
// state needs no field of its own on Env: a scenario declares its key
// beside its Spec.
type stateKey[T any] struct{ name string }

// stateSlots holds a run's per-scenario state, by key (the zero value is
// ready).
type stateSlots struct {
	mu    sync.Mutex
	slots map[any]any
}

// stateOf is the run's state under key: a zero T, made on first use, that
// later calls with the same key share.
func stateOf[T any](e *Env, key *stateKey[T]) *T {
	s := &e.state
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.slots[key]; ok {
		return v.(*T)
	}
	if s.slots == nil {
		s.slots = map[any]any{}
	}
	v := new(T)
	s.slots[key] = v
	return v
}

// writableCopy is a copy of m, of a run's state, that its caller may
// read without the state's lock and add to: never nil.
func writableCopy[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	maps.Copy(out, m)
	return out
}
