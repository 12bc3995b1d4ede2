package main

// The test gateway's offboarding, fetch, log-row and operator-secret
// parts (issue 24, part B), each with its leak switch.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"
)

// User statuses: a disabled user keeps its rows, a deleted one (with
// stale-session, which only marks it) keeps them too.
const (
	statusActive   = 1
	statusDisabled = 0
	statusDeleted  = -1
)

// active reports whether uid may use the gateway: with stale-session,
// any user that has a row.
func (g *gw) active(uid int64) bool {
	if g.leak["stale-session"] {
		return true
	}
	var st int
	if err := g.db.QueryRow(`SELECT status FROM users WHERE id = ?`, uid).Scan(&st); err != nil {
		return false
	}
	return st == statusActive
}

func (g *gw) offboardRoutes(m *http.ServeMux) {
	m.HandleFunc("POST /api/admin/tenant/{id}/disable", g.admin(g.disableTenant))
	m.HandleFunc("DELETE /api/admin/tenant/{id}", g.admin(g.deleteTenant))
	m.HandleFunc("POST /api/admin/password", g.admin(g.setPassword))
	m.HandleFunc("POST /api/fetch", g.user(g.fetch))
	m.HandleFunc("GET /api/log/{id}", g.user(g.logGet))
}

// admin wraps a handler behind ROOT_TOKEN.
func (g *gw) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if g.root == "" || bearer(r) != g.root {
			fail(w, 401, "not the root token")
			return
		}
		h(w, r)
	}
}

func (g *gw) disableTenant(w http.ResponseWriter, r *http.Request) {
	defer g.forget(r.PathValue("id"))
	res, err := g.db.Exec(`UPDATE users SET status = ? WHERE id = ?`, statusDisabled, r.PathValue("id"))
	if n, _ := rowsAffected(res, err); n != 1 {
		fail(w, 404, fmt.Sprintf("no such user (%v)", err))
		return
	}
	writeJSON(w, 200, map[string]any{"success": true})
}

func (g *gw) deleteTenant(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	defer g.forget(id)
	if g.leak["name-reuse"] {
		// Marked deleted, its name kept for newUser to bring back.
		if _, err := g.db.Exec(`UPDATE users SET status = ? WHERE id = ?`, statusDeleted, id); err != nil {
			fail(w, 500, err.Error())
			return
		}
		writeJSON(w, 200, map[string]any{"success": true})
		return
	}
	if g.leak["stale-session"] {
		// Marked deleted, its name freed: its rows, keys and session stay.
		res, err := g.db.Exec(`UPDATE users SET status = ?, name = name || '#deleted-' || id WHERE id = ?`, statusDeleted, id)
		if n, _ := rowsAffected(res, err); n != 1 {
			fail(w, 404, fmt.Sprintf("no such user (%v)", err))
			return
		}
		writeJSON(w, 200, map[string]any{"success": true})
		return
	}
	res, err := g.db.Exec(`DELETE FROM users WHERE id = ?`, id)
	if n, _ := rowsAffected(res, err); n != 1 {
		fail(w, 404, fmt.Sprintf("no such user (%v)", err))
		return
	}
	for _, table := range []string{"tokens", "channels", "logs"} {
		if _, err := g.db.Exec(`DELETE FROM `+table+` WHERE user_id = ?`, id); err != nil {
			fail(w, 500, err.Error())
			return
		}
	}
	writeJSON(w, 200, map[string]any{"success": true})
}

func rowsAffected(res interface{ RowsAffected() (int64, error) }, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// setPassword sets the admin password (an operator secret the
// provisioner mints).
func (g *gw) setPassword(w http.ResponseWriter, r *http.Request) {
	var in struct{ Password string }
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Password == "" {
		fail(w, 400, "want {password}")
		return
	}
	if _, err := g.db.Exec(`DELETE FROM settings WHERE name = 'admin_password'`); err != nil {
		fail(w, 500, err.Error())
		return
	}
	if _, err := g.db.Exec(`INSERT INTO settings (name, value) VALUES ('admin_password', ?)`, in.Password); err != nil {
		fail(w, 500, err.Error())
		return
	}
	writeJSON(w, 200, map[string]any{"success": true})
}

// adminPassword is the admin password, for the operator-secret leak.
func (g *gw) adminPassword() string {
	var v string
	_ = g.db.QueryRow(`SELECT value FROM settings WHERE name = 'admin_password'`).Scan(&v)
	return v
}

// fetch fetches the URL a user gives (an image to describe): a loopback
// or private address is refused, unless the fetch leak is on.
func (g *gw) fetch(w http.ResponseWriter, r *http.Request, _ int64) {
	var in struct {
		URL string `json:"url"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		refuse(w, "want {url}")
		return
	}
	u, err := url.Parse(in.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		refuse(w, "not an http(s) URL")
		return
	}
	if !g.leak["fetch"] && internalHost(u.Hostname()) {
		refuse(w, "refused: an internal address")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		refuse(w, err.Error())
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		refuse(w, "fetch failed")
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	writeJSON(w, 200, map[string]any{"success": true, "data": map[string]any{"status": resp.StatusCode, "body": string(body)}})
}

// internalHost reports whether host is, or resolves to, a loopback,
// private, link-local or unspecified address.
func internalHost(host string) bool {
	ips := []net.IP{net.ParseIP(host)}
	if ips[0] == nil {
		addrs, err := net.LookupIP(host)
		if err != nil {
			return true
		}
		ips = addrs
	}
	for _, ip := range ips {
		if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() {
			return true
		}
	}
	return false
}

// logGet serves one log row of the caller's (any user's, with log-route).
func (g *gw) logGet(w http.ResponseWriter, r *http.Request, uid int64) {
	id, ok := g.owned("logs", r, uid, g.leak["log-route"])
	if !ok {
		refuse(w, "no such log")
		return
	}
	var model, content string
	_ = g.db.QueryRow(`SELECT model, content FROM logs WHERE id = ?`, id).Scan(&model, &content)
	writeJSON(w, 200, map[string]any{"success": true, "data": map[string]any{"id": id, "model": model, "content": content}})
}

// deprovision disables or deletes one tenant through the admin API, as
// its stdin says.
func deprovision(stdin io.Reader) error {
	var in struct {
		Step   string `json:"step"`
		Tenant string `json:"tenant"`
		Access struct {
			IDs map[string]string `json:"ids"`
		} `json:"access"`
	}
	if err := json.NewDecoder(stdin).Decode(&in); err != nil {
		return fmt.Errorf("deprovision: read the request: %w", err)
	}
	uid := in.Access.IDs["user"]
	if _, err := strconv.ParseInt(uid, 10, 64); err != nil {
		return fmt.Errorf("deprovision %s: no user id in its access: %q", in.Tenant, uid)
	}
	base := os.Getenv("GATEWAY_URL")
	var req *http.Request
	var err error
	switch in.Step {
	case "disable":
		req, err = http.NewRequest(http.MethodPost, base+"/api/admin/tenant/"+uid+"/disable", nil)
	case "delete":
		req, err = http.NewRequest(http.MethodDelete, base+"/api/admin/tenant/"+uid, nil)
	default:
		return fmt.Errorf("deprovision %s: unknown step %q", in.Tenant, in.Step)
	}
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+os.Getenv("ROOT_TOKEN"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("deprovision %s: %w", in.Tenant, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("deprovision %s (%s): HTTP %d: %s", in.Tenant, in.Step, resp.StatusCode, bytes.TrimSpace(body))
	}
	return nil
}

// mintAdminPassword sets a fresh admin password through the admin API
// and returns it: an operator secret the provisioner prints.
func mintAdminPassword(base string) (string, error) {
	pw := "admin-password-" + randHex(12)
	b, _ := json.Marshal(map[string]string{"password": pw})
	req, err := http.NewRequest(http.MethodPost, base+"/api/admin/password", bytes.NewReader(b))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+os.Getenv("ROOT_TOKEN"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("set the admin password: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("set the admin password: HTTP %d", resp.StatusCode)
	}
	return pw, nil
}

// cwdLeak, with cwd-file, appends an upstream key to channels.txt in the
// working folder: a shared place outside the data folder.
func (g *gw) cwdLeak(key string) {
	if !g.leak["cwd-file"] {
		return
	}
	f, err := os.OpenFile("channels.txt", os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.WriteString(key + "\n")
}

// modelClients is the model-cache leak's client cache: one upstream
// channel (base URL and key) per model name, the first that served it.
var modelClients sync.Map // model -> channel

// cachedClient, with model-cache, is the channel first used for model,
// whoever asks now.
func cachedClient(model string, c channel) channel {
	v, _ := modelClients.LoadOrStore(model, c)
	return v.(channel)
}

// newUser creates a user; with name-reuse, a deleted user of that name
// comes back instead, with its id, rows and keys.
func (g *gw) newUser(name, access string) (int64, error) {
	if g.leak["name-reuse"] {
		var uid int64
		if g.db.QueryRow(`SELECT id FROM users WHERE name = ? AND status = ?`, name, statusDeleted).Scan(&uid) == nil {
			_, err := g.db.Exec(`UPDATE users SET status = ?, access_token = ? WHERE id = ?`, statusActive, access, uid)
			return uid, err
		}
	}
	res, err := g.db.Exec(`INSERT INTO users (name, access_token) VALUES (?, ?)`, name, access)
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}
