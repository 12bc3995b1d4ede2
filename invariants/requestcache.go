package invariants

import (
	"crypto/sha256"
	"encoding/binary"
	"sync"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// RequestCache remembers what a Checker found in each provider request it
// judged, so that the checks after every phase of a scenario judge only
// the requests that came since: a request, once recorded, does not change,
// and its findings depend only on it and on the tenants' canaries. An
// entry holds for one request (its tenant and sequence number, and its
// body's length, checked) under one state of every tenant's canaries,
// keys, models and shared names: a canary minted since, or a tenant added
// or gone, and every request is judged again. Safe for concurrent use.
type RequestCache struct {
	mu     sync.Mutex
	state  [sha256.Size]byte
	judged map[string]map[int]judgedRequest // tenant -> sequence number
	judges int                              // requests judged (not served from the cache), for tests
}

type judgedRequest struct {
	bodyLen  int
	findings []Finding
}

// NewRequestCache returns an empty cache.
func NewRequestCache() *RequestCache {
	return &RequestCache{judged: map[string]map[int]judgedRequest{}}
}

// WithRequestCache makes c's RequestLeaks keep what each request gave in
// rc, and judge again only the requests not judged under the same
// canaries. c is returned.
func (c *Checker) WithRequestCache(rc *RequestCache) *Checker {
	c.requests = rc
	return c
}

// canaryState names everything a request's findings depend on besides
// the request: every tenant's name, key, provider, model, canaries and
// shared names.
func canaryState(ts []*tenants.Tenant) [sha256.Size]byte {
	h := sha256.New()
	put := func(s string) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	for _, t := range ts {
		put("tenant")
		put(t.Name)
		put(t.ProviderKey())
		put(t.ProviderURL()) // a provider made again (a profile re-created) numbers its requests from 0
		put(t.Model())
		for _, c := range t.Canaries() {
			put(string(c.Kind))
			put(c.Value)
		}
		put("shared")
		for _, c := range t.Shared() {
			put(c.Value)
		}
		put("serves")
		for _, m := range t.Serves() {
			put(m)
		}
	}
	var out [sha256.Size]byte
	copy(out[:], h.Sum(nil))
	return out
}

// requestLeaksCached is m.requestLeaks through rc: the records of t not
// judged under this state are judged and kept.
func (m matcher) requestLeaksCached(rc *RequestCache, state [sha256.Size]byte, t *tenants.Tenant, recs []fakellm.Record) []Finding {
	rc.mu.Lock()
	if rc.state != state {
		rc.state = state
		rc.judged = map[string]map[int]judgedRequest{}
	}
	seen := rc.judged[t.Name]
	if seen == nil {
		seen = map[int]judgedRequest{}
		rc.judged[t.Name] = seen
	}
	var out []Finding
	var fresh []fakellm.Record
	for _, r := range recs {
		if j, ok := seen[r.Seq]; ok && j.bodyLen == len(r.RawBody) {
			out = append(out, j.findings...)
			continue
		}
		fresh = append(fresh, r)
	}
	rc.judges += len(fresh)
	rc.mu.Unlock()
	for _, r := range fresh {
		fs := m.requestLeaks(m.ts, t, []fakellm.Record{r})
		out = append(out, fs...)
		rc.mu.Lock()
		if rc.state == state {
			seen[r.Seq] = judgedRequest{bodyLen: len(r.RawBody), findings: fs}
		}
		rc.mu.Unlock()
	}
	return out
}
