package main

// The test gateway's parts that act later, on another route (issue 49): a
// token moved into a group, read through the model list; a webhook stored
// on one route and called from another; image URLs in an array of
// messages. Each has its leak switch (token-group, webhook-cross,
// vision-fetch).

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// lastHook is the webhook stored last by anyone: what the webhook-cross
// leak also calls.
type lastHook struct {
	mu  sync.Mutex
	url string
}

func (h *lastHook) set(u string) {
	h.mu.Lock()
	h.url = u
	h.mu.Unlock()
}

func (h *lastHook) get() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.url
}

func (g *gw) laterRoutes(m *http.ServeMux) {
	m.HandleFunc("PUT /api/token/{id}/group", g.user(g.tokenGroup))
	m.HandleFunc("PUT /api/user/webhook", g.user(g.webhookSet))
	m.HandleFunc("POST /api/user/webhook/test", g.user(g.webhookTest))
	m.HandleFunc("POST /api/vision", g.user(g.vision))
}

// tokenGroup moves the caller's token into a user's group (the user's
// channels then serve its model list): its own group only. With
// token-group, any user's, while answering as refused.
func (g *gw) tokenGroup(w http.ResponseWriter, r *http.Request, uid int64) {
	id, ok := g.owned("tokens", r, uid, false)
	if !ok {
		refuse(w, "no such token")
		return
	}
	var in struct {
		GroupID int64 `json:"group_id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		refuse(w, err.Error())
		return
	}
	if in.GroupID != uid && !g.leak["token-group"] {
		refuse(w, "not your group")
		return
	}
	if _, err := g.db.Exec(`UPDATE tokens SET group_id = ? WHERE id = ?`, in.GroupID, id); err != nil {
		fail(w, 500, err.Error())
		return
	}
	if in.GroupID != uid {
		refuse(w, "group change queued for approval") // and made already
		return
	}
	writeJSON(w, 200, map[string]any{"success": true})
}

// webhookSet stores the caller's webhook URL (any http(s) URL: the
// operator lets tenants call their own services, loopback included).
func (g *gw) webhookSet(w http.ResponseWriter, r *http.Request, uid int64) {
	var in struct {
		URL string `json:"url"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		refuse(w, "want {url}")
		return
	}
	if u, err := url.Parse(in.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		refuse(w, "not an http(s) URL")
		return
	}
	if _, err := g.db.Exec(`UPDATE users SET webhook = ? WHERE id = ?`, in.URL, uid); err != nil {
		fail(w, 500, err.Error())
		return
	}
	g.hook.set(in.URL)
	writeJSON(w, 200, map[string]any{"success": true})
}

// webhookTest calls the caller's webhook with a test event carrying its
// name and its latest log row; with webhook-cross, the webhook stored
// last by anyone too.
func (g *gw) webhookTest(w http.ResponseWriter, r *http.Request, uid int64) {
	var name, hook, last string
	if err := g.db.QueryRow(`SELECT name, webhook FROM users WHERE id = ?`, uid).Scan(&name, &hook); err != nil || hook == "" {
		refuse(w, "no webhook set")
		return
	}
	_ = g.db.QueryRow(`SELECT content FROM logs WHERE user_id = ? ORDER BY id DESC LIMIT 1`, uid).Scan(&last)
	event, _ := json.Marshal(map[string]any{"event": "test", "user": name, "last_log": last})
	targets := []string{hook}
	if other := g.hook.get(); g.leak["webhook-cross"] && other != "" && other != hook {
		targets = append(targets, other)
	}
	status := 0
	for i, u := range targets {
		if s := post(r.Context(), u, event); i == 0 {
			status = s
		}
	}
	writeJSON(w, 200, map[string]any{"success": true, "data": map[string]any{"status": status}})
}

// post sends body to u and returns the status (0: no answer).
func post(ctx context.Context, u string, body []byte) int {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode
}

// vision describes the images of a chat's messages: every image_url part
// of every message is fetched, an internal address refused unless
// vision-fetch is on, and the bodies' sizes answered.
func (g *gw) vision(w http.ResponseWriter, r *http.Request, _ int64) {
	var in struct {
		Messages []struct {
			Content []struct {
				Type     string `json:"type"`
				ImageURL *struct {
					URL string `json:"url"`
				} `json:"image_url"`
			} `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		refuse(w, "want {messages: [{content: [...]}]}")
		return
	}
	var sizes []int
	for _, m := range in.Messages {
		for _, c := range m.Content {
			if c.Type != "image_url" || c.ImageURL == nil {
				continue
			}
			u, err := url.Parse(c.ImageURL.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || (internalHost(u.Hostname()) && !g.leak["vision-fetch"]) {
				sizes = append(sizes, -1)
				continue
			}
			sizes = append(sizes, fetchSize(r.Context(), u.String()))
		}
	}
	writeJSON(w, 200, map[string]any{"success": true, "data": map[string]any{"sizes": sizes}})
}

// fetchSize GETs u and returns its body's size (-1: no answer).
func fetchSize(ctx context.Context, u string) int {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	n, _ := io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return int(n)
}
