// The relay: a tenant's chat completions and model list, behind its
// token, on its own channels (or every channel, with the leaks on).

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

type channel struct {
	id, userID   int64
	baseURL, key string
	model        string
}

// tokenUser resolves a relay key (sk-...) to its token and user.
func (g *gw) tokenUser(r *http.Request) (tokenID, userID int64, ok bool) {
	tokenID, userID, _, ok = g.tokenPin(r)
	return tokenID, userID, ok
}

// tokenPin resolves a relay key (sk-KEY, or sk-KEY-<channel id>: a pinned
// channel) to its token, user and pinned channel (0: none; the channel
// the token is bound to, when it is).
func (g *gw) tokenPin(r *http.Request) (tokenID, userID, channelID int64, ok bool) {
	key, _ := strings.CutPrefix(bearer(r), "sk-")
	k, ch, pinned := strings.Cut(key, "-")
	if pinned {
		n, err := strconv.ParseInt(ch, 10, 64)
		if err != nil {
			return 0, 0, 0, false
		}
		key, channelID = k, n
	}
	var bound int64
	err := g.db.QueryRow(`SELECT id, user_id, channel_id FROM tokens WHERE key = ?`, key).Scan(&tokenID, &userID, &bound)
	if channelID == 0 {
		channelID = bound
	}
	// stale-pin: the pinned form skips the user's status check.
	live := g.cachedActive(userID) || (g.leak["stale-pin"] && pinned)
	return tokenID, userID, channelID, err == nil && key != "" && live
}

func (g *gw) channels(q string, args ...any) []channel {
	rows, err := g.db.Query(`SELECT id, user_id, base_url, key, model FROM channels `+q, args...)
	if err != nil {
		return nil
	}
	defer rows.Close()
	var out []channel
	for rows.Next() {
		var c channel
		if rows.Scan(&c.id, &c.userID, &c.baseURL, &c.key, &c.model) == nil {
			out = append(out, c)
		}
	}
	return out
}

func (g *gw) chat(w http.ResponseWriter, r *http.Request) {
	tokenID, userID, pin, ok := g.tokenPin(r)
	if !ok {
		// Quoting the caller's own key back, as gateways do.
		fail(w, 401, "invalid token "+bearer(r))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		fail(w, 400, err.Error())
		return
	}
	var req map[string]any
	if err := json.Unmarshal(body, &req); err != nil {
		fail(w, 400, err.Error())
		return
	}
	model, _ := req["model"].(string)
	var chs []channel
	if pin != 0 {
		chs = g.channels(`WHERE id = ?`, pin)
		if len(chs) == 0 || (chs[0].userID != userID && !g.leak["key-channel"]) {
			fail(w, 403, "not your channel")
			return
		}
	} else if g.leak["any-model"] {
		chs = g.channels(`WHERE model = ?`, model)
	} else {
		chs = g.channels(`WHERE model = ? AND user_id = ?`, model, userID)
	}
	if len(chs) == 0 {
		fail(w, 404, "no channel of yours serves model "+model)
		return
	}
	ch := chs[0]
	if g.leak["model-cache"] {
		ch = cachedClient(model, ch)
	}
	if ctype, out, hit := g.cachedReply(req); hit {
		w.Header().Set("Content-Type", ctype)
		_, _ = w.Write(out)
		return
	}
	status, ctype, out, err := relay(r.Context(), ch, req)
	if err == nil && status == 200 {
		g.keepReply(req, ctype, out)
	}
	if (err != nil || status >= 500 || status == 429) && g.leak["failover"] {
		for _, c := range g.channels(`WHERE id != ?`, chs[0].id) {
			if status, ctype, out, err = relay(r.Context(), c, req); err == nil && status < 400 {
				break
			}
		}
	}
	if err != nil {
		fail(w, 502, "upstream: "+err.Error())
		return
	}
	logUser := userID
	if g.leak["store-leak"] {
		logUser = 1
	}
	content := string(out)
	if len(content) > 2000 {
		content = content[:2000]
	}
	_, _ = g.db.Exec(`INSERT INTO logs (user_id, token_id, model, content) VALUES (?, ?, ?, ?)`, logUser, tokenID, model, content)
	w.Header().Set("Content-Type", ctype)
	w.WriteHeader(status)
	_, _ = w.Write(out)
}

// relay sends req to channel c with c's key and model.
func relay(ctx context.Context, c channel, req map[string]any) (int, string, []byte, error) {
	req["model"] = c.model
	b, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.baseURL, "/")+"/chat/completions", bytes.NewReader(b))
	if err != nil {
		return 0, "", nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+c.key)
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", nil, err
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), out, nil
}

// models lists the models of the token's group: its user's channels, or
// those of the user whose group the token was moved into.
func (g *gw) models(w http.ResponseWriter, r *http.Request) {
	tokenID, userID, ok := g.tokenUser(r)
	if !ok {
		fail(w, 401, "invalid token")
		return
	}
	var group int64
	if g.db.QueryRow(`SELECT group_id FROM tokens WHERE id = ?`, tokenID).Scan(&group) == nil && group != 0 {
		userID = group
	}
	var data []any
	for _, c := range g.channels(`WHERE user_id = ?`, userID) {
		data = append(data, map[string]any{"id": c.model, "object": "model"})
	}
	writeJSON(w, 200, map[string]any{"object": "list", "data": data})
}
