// Package lru keeps a bounded number of values by key, dropping the least
// recently used first: for results that are a pure function of their key
// (a compiled matcher of a set of patterns, the parse of a file's bytes),
// kept so that the same work is not done again and again.
package lru

import "sync"

// Cache holds a bounded number of values; safe for concurrent use. The zero value
// is not usable: make one with New.
type Cache[K comparable, V any] struct {
	max  int
	mu   sync.Mutex
	byK  map[K]*entry[V]
	tick uint64
}

type entry[V any] struct {
	v    V
	used uint64
}

// New returns an empty cache of at most size values (at least 1).
func New[K comparable, V any](size int) *Cache[K, V] {
	return &Cache[K, V]{max: max(1, size), byK: map[K]*entry[V]{}}
}

// Get returns the value kept under k, and whether there is one; it counts
// as a use.
func (c *Cache[K, V]) Get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byK[k]
	if e == nil {
		var zero V
		return zero, false
	}
	c.tick++
	e.used = c.tick
	return e.v, true
}

// Put keeps v under k, dropping the least recently used value when the
// cache is full.
func (c *Cache[K, V]) Put(k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byK[k]; !ok && len(c.byK) >= c.max {
		var oldest K
		least := ^uint64(0)
		for key, e := range c.byK {
			if e.used < least {
				oldest, least = key, e.used
			}
		}
		delete(c.byK, oldest)
	}
	c.tick++
	c.byK[k] = &entry[V]{v: v, used: c.tick}
}

// Len is how many values the cache holds.
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byK)
}
