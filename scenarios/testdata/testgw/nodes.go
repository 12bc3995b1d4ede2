package main

// The test gateway run as several nodes over one data folder (a target's
// replicas: N): what one node keeps for itself, each with its leak switch
// (issue 47's gateway-replicas).
//
//   - node-cache: each node caches a user's status in its own memory and
//     forgets it only where the admin call that changed it landed, so a
//     tenant disabled through node 1 is still served by node 2 (as a
//     gateway whose ban list is per process).
//   - prompt-cache: a response cache in the shared database keyed on the
//     request's messages alone, not on who sent them, so the same prompt
//     of two tenants gets the first one's answer (a response cache keyed
//     without the tenant).

import (
	"encoding/json"
	"strconv"
	"sync"
)

// nodeCache is one node's memory of users' statuses (node-cache).
type nodeCache struct {
	mu     sync.Mutex
	status map[int64]bool
}

// cachedActive is active through this node's cache: with node-cache, a
// status read once is kept until this node forgets it.
func (g *gw) cachedActive(uid int64) bool {
	if !g.leak["node-cache"] {
		return g.active(uid)
	}
	g.nodes.mu.Lock()
	defer g.nodes.mu.Unlock()
	if v, ok := g.nodes.status[uid]; ok {
		return v
	}
	if g.nodes.status == nil {
		g.nodes.status = map[int64]bool{}
	}
	v := g.active(uid)
	g.nodes.status[uid] = v
	return v
}

// forget drops user id from this node's cache (the node an admin call
// landed on); the other nodes keep what they had.
func (g *gw) forget(id string) {
	uid, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return
	}
	g.nodes.mu.Lock()
	defer g.nodes.mu.Unlock()
	delete(g.nodes.status, uid)
}

const promptCacheSchema = `CREATE TABLE IF NOT EXISTS prompt_cache (prompt TEXT PRIMARY KEY, content_type TEXT, body BLOB)`

// promptKey is the prompt-cache key of a chat request: its messages, and
// nothing of who sent it.
func promptKey(req map[string]any) string {
	b, _ := json.Marshal(req["messages"])
	return string(b)
}

// cachedReply is the prompt cache's answer to req, if it has one.
func (g *gw) cachedReply(req map[string]any) (ctype string, body []byte, ok bool) {
	if !g.leak["prompt-cache"] {
		return "", nil, false
	}
	err := g.db.QueryRow(`SELECT content_type, body FROM prompt_cache WHERE prompt = ?`, promptKey(req)).Scan(&ctype, &body)
	return ctype, body, err == nil
}

// keepReply stores a successful answer in the prompt cache.
func (g *gw) keepReply(req map[string]any, ctype string, body []byte) {
	if !g.leak["prompt-cache"] {
		return
	}
	_, _ = g.db.Exec(`INSERT OR IGNORE INTO prompt_cache (prompt, content_type, body) VALUES (?, ?, ?)`, promptKey(req), ctype, body)
}
