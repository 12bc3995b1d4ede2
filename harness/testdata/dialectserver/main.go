// Command dialectserver is a small pooled agent server that speaks a
// dialect other than DESIGN.md's, for the harness's dialect tests: other
// method names (open, say, shut), a ready line with a port only
// ("DIALECT READY port=P"), a health check that needs the token in a
// header, a ready event named hello, tool arguments only in the step.end
// event, a keyless metadata probe (GET <base>/props) before a session's
// first turn, a shell tool named exec{cmd}, the provider key read from
// model.token ("${VAR}" expanded from the profile's .env), profiles made
// and removed by a command (profile add|rm NAME), and an unknown profile
// falling back to the launch profile. Its plugins are executables
// speaking JSON lines, one host per tenant (plugins.go). framed.go adds a
// second transport: framed websocket messages, and an HTTP chat selecting
// the agent by model. shared.go adds a mode (DIALECT_SHARED_CONFIG) in
// which one operator config file holds every agent's section and each
// agent's state lives under DIALECT_STATE, apart from its home.
//
// With DIALECT_LEAK=1 it leaks: every reply.done of a named profile's
// session carries the launch profile's .env values (a positive control).
// With DIALECT_LEAK=launch-env it leaks as Hermes 0.18 does: a named
// profile's session reports the launch profile's model, and its "${VAR}"
// expands from the launch profile's .env (the process environment), so its
// provider gets the launch key. With DIALECT_LEAK=shared-cache it keeps
// one cache of answers keyed by the prompt's text alone, across tenants:
// a tenant sending a prompt another sent before gets the other's answer.
//
// With DIALECT_IDEMPOTENCY=1 every say must carry an idempotency key (idem)
// no say carried before; a missing or repeated one is refused (4090).
//
// With DIALECT_PORT=fixed it refuses --port 0 and its ready line names no
// port (the harness picks one, passes it as {port}, and waits on the
// health check).
//
// With DIALECT_IDS=rewrite it rewrites the model's tool-call ids as some
// servers do: the "-" characters dropped, and a repeat of an id already
// given in the session suffixed 2, 3, ... (its tool results carry the
// rewritten id).
//
// With DIALECT_WRAP=1 it wraps prompts as real servers do: every prompt
// reaches the provider as content parts with a timestamp before it and a
// runtime line after it, and a "runtime facts" user message follows every
// tool result. DIALECT_WRAP=mangle wraps and also lower-cases the prompt,
// which breaks any instruction in it (the ran-controls' positive control);
// DIALECT_WRAP=lose-results wraps and never hands a tool result back, so
// every turn loops (the turn bound's positive control).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/gorilla/websocket"
	"gopkg.in/yaml.v3"
	_ "modernc.org/sqlite"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "dialectserver:", err)
		os.Exit(1)
	}
}

func launchHome() string { return os.Getenv("DIALECT_HOME") }

func profilesRoot() string { return filepath.Join(launchHome(), "profiles") }

func run(args []string) error {
	if launchHome() == "" {
		return errors.New("DIALECT_HOME is not set")
	}
	switch {
	case len(args) == 1 && args[0] == "root":
		fmt.Println(profilesRoot())
		return nil
	case len(args) == 3 && args[0] == "profile" && args[1] == "add":
		dir := filepath.Join(profilesRoot(), args[2])
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		out, _ := json.Marshal(map[string]any{"done": true, "created": args[2], "where": dir})
		fmt.Println("creating profile " + args[2])
		fmt.Println(string(out))
		return nil
	case len(args) == 3 && args[0] == "profile" && args[1] == "rm":
		// The target file's hook_env names who asks; the launch tenant does.
		if os.Getenv("DIALECT_WHO") == "" {
			return errors.New("profile rm: DIALECT_WHO is not set")
		}
		if err := sharedRemove(args[2]); err != nil {
			return err
		}
		return os.RemoveAll(filepath.Join(profilesRoot(), args[2]))
	case len(args) == 3 && args[0] == "config" && args[1] == "cwd":
		// Sets terminal.cwd of the profile whose home DIALECT_HOME is (the
		// target file's by_profile hook of config.set cwd: the server's RPC
		// has no settings methods).
		return setConfigCwd(launchHome(), args[2])
	case len(args) == 5 && args[0] == "serve" && args[1] == "--host" && args[3] == "--port":
		return serve(args[2], args[4])
	case len(args) == 1 && args[0] == "stdio":
		return stdio()
	case len(args) == 2 && args[0] == "stdio" && args[1] == "--framed":
		return stdioFramed()
	}
	return fmt.Errorf("usage: dialectserver root | profile add|rm NAME | config cwd DIR | serve --host H --port P (got %q)", args)
}

func setConfigCwd(home, dir string) error {
	path := filepath.Join(home, "config.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	cfg := map[string]any{}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	term, _ := cfg["terminal"].(map[string]any)
	if term == nil {
		term = map[string]any{}
	}
	term["cwd"] = dir
	cfg["terminal"] = term
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		return err
	}
	fmt.Println(`{"ok":true}`)
	return nil
}

func serve(host, port string) error {
	token := os.Getenv("DIALECT_TOKEN")
	if token == "" {
		return errors.New("DIALECT_TOKEN is not set")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fixed := os.Getenv("DIALECT_PORT") == "fixed"
	if fixed && port == "0" {
		return errors.New("--port 0: this server takes a fixed port (DIALECT_PORT=fixed)")
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return err
	}
	if sharedMode() {
		go watchShared(ctx)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Dialect-Token") != token {
			http.Error(w, "token required", http.StatusUnauthorized)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	var wg sync.WaitGroup
	mux.HandleFunc("/api/ws", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("token") != token {
			http.Error(w, "bad token", http.StatusUnauthorized)
			return
		}
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		c := &conn{sessions: map[string]*session{},
			write: func(b []byte) error { return ws.WriteMessage(websocket.TextMessage, b) },
			read: func() ([]byte, error) {
				_, data, err := ws.ReadMessage()
				return data, err
			}}
		c.serve(ctx, &wg)
	})
	serveFramed(ctx, mux, token, &wg)
	srv := &http.Server{Handler: mux}
	if fixed {
		fmt.Printf("starting up\nDIALECT READY\n") // no port: the caller gave it
	} else {
		fmt.Printf("starting up\nDIALECT READY port=%d\n", ln.Addr().(*net.TCPAddr).Port)
	}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	defer stopPlugins()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	wg.Wait()
	return nil
}

// stdio serves one connection on stdin and stdout, a frame a line, until
// stdin ends; its turns finish first.
func stdio() error {
	return serveLines(func(write func([]byte) error, read func() ([]byte, error)) *conn {
		return &conn{sessions: map[string]*session{}, write: write, read: read}
	})
}

// keySet is the idempotency keys the server has seen
// (DIALECT_IDEMPOTENCY=1).
type keySet struct {
	mu   sync.Mutex
	seen map[string]bool
}

var seenKeys = &keySet{seen: map[string]bool{}}

// add records key and reports whether it was new.
func (k *keySet) add(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.seen[key] {
		return false
	}
	k.seen[key] = true
	return true
}

type conn struct {
	write func([]byte) error
	read  func() ([]byte, error)
	wmu   sync.Mutex

	mu       sync.Mutex
	sessions map[string]*session
	next     int
}

type session struct {
	id      string
	home    string
	profile string // "" for the launch profile
	probed  bool
	ids     map[string]int // DIALECT_IDS=rewrite: the tool-call ids given so far
}

func (c *conn) send(v any) {
	b, _ := json.Marshal(v)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.write(b)
}

func (c *conn) event(typ, sid string, payload map[string]any) {
	c.send(map[string]any{"jsonrpc": "2.0", "method": "event", "params": map[string]any{"type": typ, "session_id": sid, "payload": payload}})
}

func (c *conn) reply(id json.RawMessage, result any, code int, msg string) {
	m := map[string]any{"jsonrpc": "2.0", "id": id}
	if code != 0 {
		m["error"] = map[string]any{"code": code, "message": msg}
	} else {
		m["result"] = result
	}
	c.send(m)
}

func (c *conn) serve(ctx context.Context, wg *sync.WaitGroup) {
	if os.Getenv("DIALECT_QUIET") != "1" {
		c.event("hello", "", map[string]any{"dialect": "test"})
	}
	for {
		data, err := c.read()
		if err != nil {
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params map[string]any  `json:"params"`
		}
		if json.Unmarshal(data, &req) != nil {
			continue
		}
		switch req.Method {
		case "open":
			who, _ := req.Params["who"].(string)
			home, who := findAgent(who) // an unknown profile falls back to the launch profile
			cfg, _, _, err := agentSetup(home, who)
			if err == nil && cfg.Model.Owner == "" {
				err = fmt.Errorf("%s/config.yaml has no model.owner", home)
			}
			if err != nil {
				c.reply(req.ID, nil, -32000, err.Error())
				continue
			}
			// Ids are random and unique across connections: a number per
			// connection would give two tenants the same id, and a probe
			// naming another's session would name its own.
			var rnd [8]byte
			_, _ = rand.Read(rnd[:])
			c.mu.Lock()
			c.next++
			s := &session{id: "s" + hex.EncodeToString(rnd[:]), home: home, profile: who}
			c.sessions[s.id] = s
			c.mu.Unlock()
			model := cfg.Model.Default
			if launchEnvLeak() && who != "" && !sharedMode() {
				if lc, err := readConfig(launchHome()); err == nil {
					model = lc.Model.Default
				}
			}
			c.reply(req.ID, map[string]any{"sid": s.id, "meta": map[string]any{"model": model, "who": who}}, 0, "")
		case "say":
			sid, _ := req.Params["sid"].(string)
			text, _ := req.Params["message"].(string)
			c.mu.Lock()
			s := c.sessions[sid]
			c.mu.Unlock()
			if s == nil {
				c.reply(req.ID, nil, 4040, "no session "+sid)
				continue
			}
			if os.Getenv("DIALECT_IDEMPOTENCY") == "1" {
				// Every say carries a key of its own; a key seen before is a
				// replay, refused.
				key, _ := req.Params["idem"].(string)
				if key == "" || !seenKeys.add(key) {
					c.reply(req.ID, nil, 4090, fmt.Sprintf("say: idempotency key %q missing or already used", key))
					continue
				}
			}
			c.reply(req.ID, map[string]any{"accepted": true}, 0, "")
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.turn(ctx, s, text)
			}()
		case "shut":
			sid, _ := req.Params["sid"].(string)
			c.mu.Lock()
			_, ok := c.sessions[sid]
			delete(c.sessions, sid)
			c.mu.Unlock()
			if !ok {
				c.reply(req.ID, nil, 4040, "no session "+sid)
				continue
			}
			c.reply(req.ID, map[string]any{"closed": true}, 0, "")
		default:
			c.reply(req.ID, nil, -32601, "method not found: "+req.Method)
		}
	}
}
