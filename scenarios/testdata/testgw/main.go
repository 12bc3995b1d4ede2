// Command testgw is a small multi-tenant LLM gateway for the gateway
// family's tests: one SQLite store (WAL) for every tenant (users,
// channels, tokens, logs), an OpenAI-compatible relay behind each
// tenant's token, a management API behind each user's access token, and
// an admin API behind ROOT_TOKEN. TESTGW_LEAK (comma-separated) makes it
// leak the way real gateways do, for the checks' positive controls:
//
//	token-route  GET/DELETE /api/token/{id} serves any user's token
//	any-model    a token may name any channel's model (its owner's channel serves it)
//	failover     a failed upstream call is retried on every other channel
//	store-leak   every upstream key is also kept in a settings table, and
//	             every log row is filed under user 1
//	anon-logs    GET /api/log/self with no credentials serves every user's logs
//	key-channel  a relay key with a channel suffix (sk-KEY-<channel id>) pins
//	             any channel, another user's too (clean: only the key's user's)
//	mixed-owner  PUT /api/token/{id}/channel binds the caller's token to any
//	             channel ("my token, your channel"; clean: only its own)
//	made-token   GET /api/token/{id} serves a token made through POST
//	             /api/token to any user (clean: only to its owner)
//	log-filter   GET /api/log/self?keyword=K drops the owner condition
//	stale-session  a disabled or deleted user's access token and keys still
//	             work (delete only marks the user deleted)
//	fetch        POST /api/fetch fetches any URL, loopback included, and
//	             returns its body
//	log-route    GET /api/log/{id} serves any user's log row
//	operator-secret  GET /api/user/self carries the admin password
//	name-reuse   delete only marks the user deleted, and a tenant created
//	             again under its name gets the old user back (its id, rows
//	             and keys)
//	cwd-file     every upstream key is also appended to channels.txt in the
//	             gateway's working folder (outside its data folder)
//	model-cache  the relay keeps one upstream client per model name: a
//	             tenant naming a model another tenant's channel also serves
//	             may be sent with that tenant's key
//	stale-cookie a disabled user's session cookie still opens the
//	             management API (its access token as a bearer is refused)
//	stale-pin    a disabled user's relay key with a channel suffix
//	             (sk-KEY-<channel id>) still relays (the bare key is refused)
//	token-group  PUT /api/token/{id}/group moves the caller's token into
//	             any user's group while answering as refused: only the
//	             model list with that token (GET /v1/models, a later
//	             route) shows the other user's models
//	webhook-cross  POST /api/user/webhook/test also calls the webhook
//	             stored last by anyone, with the caller's data
//	vision-fetch  POST /api/vision fetches every image URL of its
//	             messages, loopback included
//
// The management API takes a user's access token as "Authorization:
// Bearer" or as the cookie "session"; the provisioner prints both forms.
//
// Usage:
//
//	testgw serve --port P --data DIR
//	testgw provision   (stdin: the roster; env GATEWAY_URL, ROOT_TOKEN; stdout: the access)
//	testgw deprovision (stdin: {"step": "disable"|"delete", "tenant": NAME, "access": {...}})
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "modernc.org/sqlite"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testgw serve --port P --data DIR | testgw provision")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "provision":
		err = provision(os.Stdin, os.Stdout)
	case "deprovision":
		err = deprovision(os.Stdin)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testgw:", err)
		os.Exit(1)
	}
}

type gw struct {
	db    *sql.DB
	root  string
	leak  map[string]bool
	nodes nodeCache // what this node keeps for itself (nodes.go)
	hook  lastHook  // the webhook-cross leak's last stored webhook
}

const schema = `
CREATE TABLE IF NOT EXISTS users (id INTEGER PRIMARY KEY, name TEXT UNIQUE, access_token TEXT, status INTEGER NOT NULL DEFAULT 1, webhook TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS channels (id INTEGER PRIMARY KEY, user_id INTEGER, base_url TEXT, key TEXT, model TEXT);
CREATE TABLE IF NOT EXISTS tokens (id INTEGER PRIMARY KEY, user_id INTEGER, key TEXT UNIQUE, name TEXT, made INTEGER DEFAULT 0, channel_id INTEGER DEFAULT 0, group_id INTEGER DEFAULT 0);
CREATE TABLE IF NOT EXISTS logs (id INTEGER PRIMARY KEY, user_id INTEGER, token_id INTEGER, model TEXT, content TEXT);
CREATE TABLE IF NOT EXISTS settings (name TEXT, value TEXT);
`

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	port := fs.Int("port", 0, "port on 127.0.0.1")
	data := fs.String("data", "", "data folder")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *data == "" {
		return errors.New("serve: --data is required")
	}
	if err := os.MkdirAll(*data, 0o755); err != nil {
		return err
	}
	db, err := sql.Open("sqlite", "file:"+uriPath(filepath.Join(*data, "gw.db"))+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)")
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(schema + promptCacheSchema); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	g := &gw{db: db, root: os.Getenv("ROOT_TOKEN"), leak: map[string]bool{}}
	for _, l := range strings.Split(os.Getenv("TESTGW_LEAK"), ",") {
		if l = strings.TrimSpace(l); l != "" {
			g.leak[l] = true
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(*port))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: g.mux(), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Printf("testgw listening on %s\n", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// uriPath escapes what a SQLite URI's path may not hold raw.
func uriPath(p string) string {
	return strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(p)
}

func (g *gw) mux() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("GET /api/status", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, map[string]any{"success": true}) })
	m.HandleFunc("POST /api/admin/tenant", g.adminTenant)
	m.HandleFunc("POST /v1/chat/completions", g.chat)
	m.HandleFunc("GET /v1/models", g.models)
	m.HandleFunc("GET /api/user/self", g.user(g.userSelf))
	m.HandleFunc("GET /api/log/self", g.anonLogs(g.user(g.logSelf)))
	m.HandleFunc("POST /api/token", g.user(g.tokenMake))
	m.HandleFunc("GET /api/token/{id}", g.user(g.tokenGet))
	m.HandleFunc("DELETE /api/token/{id}", g.user(g.tokenDelete))
	m.HandleFunc("PUT /api/token/{id}/channel", g.user(g.tokenBind))
	m.HandleFunc("GET /api/channel/{id}", g.user(g.channelGet))
	g.laterRoutes(m)
	g.offboardRoutes(m)
	return m
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg}})
}

// refuse is the management API's refusal: 200 {"success": false}, as
// one-api answers.
func refuse(w http.ResponseWriter, msg string) {
	writeJSON(w, 200, map[string]any{"success": false, "message": msg})
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func bearer(r *http.Request) string {
	v, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return strings.TrimSpace(v)
}

func (g *gw) adminTenant(w http.ResponseWriter, r *http.Request) {
	if g.root == "" || bearer(r) != g.root {
		fail(w, 401, "not the root token")
		return
	}
	var in struct{ Name, BaseURL, Key, Model string }
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		fail(w, 400, err.Error())
		return
	}
	access := randHex(16)
	uid, err := g.newUser(in.Name, access)
	if err != nil {
		fail(w, 500, err.Error())
		return
	}
	res, err := g.db.Exec(`INSERT INTO channels (user_id, base_url, key, model) VALUES (?, ?, ?, ?)`, uid, in.BaseURL, in.Key, in.Model)
	if err != nil {
		fail(w, 500, err.Error())
		return
	}
	cid, _ := res.LastInsertId()
	if g.leak["store-leak"] {
		_, _ = g.db.Exec(`INSERT INTO settings (name, value) VALUES (?, ?)`, "upstream", in.Key)
	}
	g.cwdLeak(in.Key)
	key := randHex(24)
	res, err = g.db.Exec(`INSERT INTO tokens (user_id, key, name) VALUES (?, ?, ?)`, uid, key, in.Name+"-token")
	if err != nil {
		fail(w, 500, err.Error())
		return
	}
	tid, _ := res.LastInsertId()
	writeJSON(w, 200, map[string]any{"user_id": uid, "channel_id": cid, "token_id": tid, "key": "sk-" + key, "access_token": access})
}

// provision creates every roster tenant through the admin API and prints
// the access the harness reads.
func provision(stdin io.Reader, stdout io.Writer) error {
	var roster struct {
		Tenants []struct {
			Name    string `json:"name"`
			BaseURL string `json:"base_url"`
			Key     string `json:"key"`
			Model   string `json:"model"`
		} `json:"tenants"`
	}
	if err := json.NewDecoder(stdin).Decode(&roster); err != nil {
		return fmt.Errorf("provision: read the roster: %w", err)
	}
	base := os.Getenv("GATEWAY_URL")
	out := map[string]any{}
	for _, t := range roster.Tenants {
		b, _ := json.Marshal(map[string]string{"name": t.Name, "baseurl": t.BaseURL, "key": t.Key, "model": t.Model})
		req, err := http.NewRequest(http.MethodPost, base+"/api/admin/tenant", bytes.NewReader(b))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+os.Getenv("ROOT_TOKEN"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("provision %s: %w", t.Name, err)
		}
		var got struct {
			UserID      int64  `json:"user_id"`
			ChannelID   int64  `json:"channel_id"`
			TokenID     int64  `json:"token_id"`
			Key         string `json:"key"`
			AccessToken string `json:"access_token"`
		}
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			return fmt.Errorf("provision %s: HTTP %d: %v", t.Name, resp.StatusCode, err)
		}
		out[t.Name] = map[string]any{
			"key": got.Key, "models": []string{t.Model}, "base_path": "/v1",
			"headers":     map[string]string{"Authorization": "Bearer " + got.AccessToken},
			"credentials": map[string]map[string]string{"session": {"Cookie": "session=" + got.AccessToken}},
			"ids": map[string]string{"user": strconv.FormatInt(got.UserID, 10), "channel": strconv.FormatInt(got.ChannelID, 10),
				"token": strconv.FormatInt(got.TokenID, 10)},
		}
	}
	doc := map[string]any{"tenants": out}
	pw, err := mintAdminPassword(base)
	if err != nil {
		return err
	}
	doc["operator_secrets"] = map[string]string{"admin_password": pw}
	return json.NewEncoder(stdout).Encode(doc)
}
