// The management API: a user's own record, logs, tokens and channels,
// behind its access token.

package main

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// access is the user's access token a management request carries: as
// "Authorization: Bearer", or as the cookie "session".
func access(r *http.Request) string {
	if b := bearer(r); b != "" {
		return b
	}
	if c, err := r.Cookie("session"); err == nil {
		return c.Value
	}
	return ""
}

// user wraps a management handler: the caller is the user whose access
// token the request carries.
func (g *gw) user(h func(w http.ResponseWriter, r *http.Request, userID int64)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var uid int64
		tok := access(r)
		// stale-cookie: a session cookie skips the user's status check.
		live := func() bool { return g.active(uid) || (g.leak["stale-cookie"] && bearer(r) == "") }
		if err := g.db.QueryRow(`SELECT id FROM users WHERE access_token = ?`, tok).Scan(&uid); err != nil || tok == "" || !live() {
			fail(w, 401, "not logged in")
			return
		}
		h(w, r, uid)
	}
}

// anonLogs is the anon-logs leak: a request with no credentials gets
// every user's logs.
func (g *gw) anonLogs(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if g.leak["anon-logs"] && access(r) == "" {
			g.logSelf(w, r, 0)
			return
		}
		next(w, r)
	}
}

func (g *gw) userSelf(w http.ResponseWriter, _ *http.Request, uid int64) {
	var name string
	_ = g.db.QueryRow(`SELECT name FROM users WHERE id = ?`, uid).Scan(&name)
	data := map[string]any{"id": uid, "name": name}
	if g.leak["operator-secret"] {
		data["admin_hint"] = g.adminPassword()
	}
	writeJSON(w, 200, map[string]any{"success": true, "data": data})
}

// logSelf serves the caller's logs (uid 0: everyone's, the anon-logs
// leak), those whose content holds ?keyword= when given.
func (g *gw) logSelf(w http.ResponseWriter, r *http.Request, uid int64) {
	q, args := `SELECT id, model, content FROM logs WHERE (user_id = ? OR ? = 0)`, []any{uid, uid}
	if kw := r.URL.Query().Get("keyword"); kw != "" {
		if g.leak["log-filter"] {
			q, args = `SELECT id, model, content FROM logs WHERE 1 = 1`, nil
		}
		q, args = q+` AND content LIKE ?`, append(args, "%"+kw+"%")
	}
	rows, err := g.db.Query(q+` ORDER BY id`, args...)
	if err != nil {
		fail(w, 500, err.Error())
		return
	}
	defer rows.Close()
	var data []any
	for rows.Next() {
		var id int64
		var model, content string
		if rows.Scan(&id, &model, &content) == nil {
			data = append(data, map[string]any{"id": id, "model": model, "content": content})
		}
	}
	writeJSON(w, 200, map[string]any{"success": true, "data": data})
}

// owned reports whether the row of table with the path's id belongs to
// uid (or, with the leak, whether it exists at all).
func (g *gw) owned(table string, r *http.Request, uid int64, leak bool) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		return 0, false
	}
	var owner int64
	if g.db.QueryRow(`SELECT user_id FROM `+table+` WHERE id = ?`, id).Scan(&owner) != nil {
		return id, false
	}
	return id, owner == uid || leak
}

func (g *gw) tokenGet(w http.ResponseWriter, r *http.Request, uid int64) {
	id, ok := g.owned("tokens", r, uid, g.leak["token-route"])
	if !ok && g.leak["made-token"] {
		var made int64
		ok = g.db.QueryRow(`SELECT made FROM tokens WHERE id = ?`, id).Scan(&made) == nil && made == 1
	}
	if !ok {
		refuse(w, "no such token")
		return
	}
	var key, name string
	_ = g.db.QueryRow(`SELECT key, name FROM tokens WHERE id = ?`, id).Scan(&key, &name)
	writeJSON(w, 200, map[string]any{"success": true, "data": map[string]any{"id": id, "key": key, "name": name}})
}

func (g *gw) tokenDelete(w http.ResponseWriter, r *http.Request, uid int64) {
	id, ok := g.owned("tokens", r, uid, g.leak["token-route"])
	if !ok {
		refuse(w, "no such token")
		return
	}
	_, _ = g.db.Exec(`DELETE FROM tokens WHERE id = ?`, id)
	writeJSON(w, 200, map[string]any{"success": true})
}

// tokenMake makes a new token of the caller's and answers its id.
func (g *gw) tokenMake(w http.ResponseWriter, r *http.Request, uid int64) {
	var in struct {
		Name string `json:"name"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Name == "" {
		refuse(w, "want {\"name\": ...}")
		return
	}
	key := randHex(24)
	res, err := g.db.Exec(`INSERT INTO tokens (user_id, key, name, made) VALUES (?, ?, ?, 1)`, uid, key, in.Name)
	if err != nil {
		fail(w, 500, err.Error())
		return
	}
	id, _ := res.LastInsertId()
	writeJSON(w, 200, map[string]any{"success": true, "data": map[string]any{"id": id, "name": in.Name, "key": "sk-" + key}})
}

// tokenBind binds the caller's token to one of its channels (with the
// mixed-owner leak: to any channel).
func (g *gw) tokenBind(w http.ResponseWriter, r *http.Request, uid int64) {
	id, ok := g.owned("tokens", r, uid, false)
	if !ok {
		refuse(w, "no such token")
		return
	}
	var in struct {
		ChannelID int64 `json:"channel_id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		refuse(w, err.Error())
		return
	}
	var owner int64
	if g.db.QueryRow(`SELECT user_id FROM channels WHERE id = ?`, in.ChannelID).Scan(&owner) != nil || (owner != uid && !g.leak["mixed-owner"]) {
		refuse(w, "no such channel")
		return
	}
	_, _ = g.db.Exec(`UPDATE tokens SET channel_id = ? WHERE id = ?`, in.ChannelID, id)
	writeJSON(w, 200, map[string]any{"success": true})
}

func (g *gw) channelGet(w http.ResponseWriter, r *http.Request, uid int64) {
	id, ok := g.owned("channels", r, uid, false)
	if !ok {
		refuse(w, "no such channel")
		return
	}
	var model string
	_ = g.db.QueryRow(`SELECT model FROM channels WHERE id = ?`, id).Scan(&model)
	writeJSON(w, 200, map[string]any{"success": true, "data": map[string]any{"id": id, "model": model}})
}
