package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/llm"
)

// ResponseCache is profile's response cache (an llm.Cache), or nil when
// the cluster caches no answers (ResponseTTL 0).
func (c *Cluster) ResponseCache(profile string) llm.Cache {
	if c.opts.ResponseTTL <= 0 {
		return nil
	}
	return responseCache{c: c, profile: profile}
}

type responseCache struct {
	c       *Cluster
	profile string
}

// key is where an answer to body is kept: under the tenant, or under the
// cache-key-no-tenant fault under the request alone.
func (r responseCache) key(body []byte) string {
	sum := sha256.Sum256(body)
	h := hex.EncodeToString(sum[:])
	if r.c.opts.Faults.Has(faults.CacheKeyNoTenant) {
		return r.c.prefix + "llm:" + h // the bug: no tenant in the key
	}
	return r.c.key(r.profile, "llm", h)
}

func (r responseCache) Get(ctx context.Context, body []byte) (llm.Response, bool) {
	v, ok, err := r.c.kv.Get(ctx, r.key(body))
	if err != nil || !ok {
		return llm.Response{}, false
	}
	var resp llm.Response
	if json.Unmarshal([]byte(v), &resp) != nil {
		return llm.Response{}, false
	}
	return resp, true
}

func (r responseCache) Put(ctx context.Context, body []byte, resp llm.Response) {
	b, err := json.Marshal(resp)
	if err != nil {
		return
	}
	if err := r.c.kv.Set(ctx, r.key(body), string(b), r.c.opts.ResponseTTL); err != nil {
		r.c.opts.Log.Warn("cluster: response cache", "profile", r.profile, "err", err)
	}
}
