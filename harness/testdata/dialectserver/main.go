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
// With DIALECT_WRAP=1 it wraps prompts as real servers do: every prompt
// reaches the provider as content parts with a timestamp before it and a
// runtime line after it, and a "runtime facts" user message follows every
// tool result. DIALECT_WRAP=mangle wraps and also lower-cases the prompt,
// which breaks any instruction in it (the ran-controls' positive control);
// DIALECT_WRAP=lose-results wraps and never hands a tool result back, so
// every turn loops (the turn bound's positive control).
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

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
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return err
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
	fmt.Printf("starting up\nDIALECT READY port=%d\n", ln.Addr().(*net.TCPAddr).Port)
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

type config struct {
	Model struct {
		BaseURL string `yaml:"base_url"`
		Default string `yaml:"default"`
		Token   string `yaml:"token"`
		Owner   string `yaml:"owner"`
	} `yaml:"model"`
	Terminal struct {
		Cwd string `yaml:"cwd"`
	} `yaml:"terminal"`
}

func launchEnvLeak() bool { return os.Getenv("DIALECT_LEAK") == "launch-env" }

// findAgent is the home and the profile of a session naming who: who's,
// or the launch profile's ("") when who names no profile (shared.go: the
// shared config's agents).
func findAgent(who string) (home, profile string) {
	if sharedMode() {
		return sharedFind(who)
	}
	if who != "" && who != "." && who != ".." && !strings.Contains(who, "/") {
		if _, err := os.Stat(filepath.Join(profilesRoot(), who, "config.yaml")); err == nil {
			return filepath.Join(profilesRoot(), who), who
		}
	}
	return launchHome(), ""
}

// agentSetup is a session's config, its tools' environment and its
// provider key: from the home's config.yaml and .env ("${VAR}" in
// model.token expanded from the .env), or from the shared config.
func agentSetup(home, profile string) (config, map[string]string, string, error) {
	if sharedMode() {
		return sharedSetup(profile)
	}
	cfg, err := readConfig(home)
	if err != nil {
		return cfg, nil, "", err
	}
	dotenv := readDotEnv(home)
	keyEnv := dotenv
	if launchEnvLeak() {
		keyEnv = readDotEnv(launchHome())
	}
	key := varRE.ReplaceAllStringFunc(cfg.Model.Token, func(m string) string { return keyEnv[m[2:len(m)-1]] })
	return cfg, dotenv, key, nil
}

// launchEnv is the launch profile's variables (the DIALECT_LEAK=1 leak).
func launchEnv() map[string]string {
	if sharedMode() {
		return sharedLaunchEnv()
	}
	return readDotEnv(launchHome())
}

func readConfig(home string) (config, error) {
	var cfg config
	data, err := os.ReadFile(filepath.Join(home, "config.yaml"))
	if err != nil {
		return cfg, err
	}
	return cfg, yaml.Unmarshal(data, &cfg)
}

func readDotEnv(home string) map[string]string {
	env := map[string]string{}
	f, err := os.Open(filepath.Join(home, ".env"))
	if err != nil {
		return env
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if ok && !strings.HasPrefix(k, "#") {
			env[k] = strings.Trim(v, `"`)
		}
	}
	return env
}

var varRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

func (c *conn) turn(ctx context.Context, s *session, text string) {
	var msgs []any
	// The turn is stored before its end is announced, as a client may
	// read the store once it has the end.
	fail := func(err error) {
		persist(s, msgs)
		c.event("oops", s.id, map[string]any{"message": err.Error()})
	}
	cfg, dotenv, key, err := agentSetup(s.home, s.profile)
	if err != nil {
		fail(err)
		return
	}
	serverLog(s, key)
	if !s.probed {
		s.probed = true
		// A metadata probe without a key, as real clients make.
		if req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Model.BaseURL+"/props", nil); err == nil {
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}
	if answer, ok := sharedCache.get(text); ok {
		msgs = []any{map[string]any{"role": "user", "content": text}, map[string]any{"role": "assistant", "content": answer}}
		persist(s, msgs)
		c.event("reply.done", s.id, map[string]any{"outcome": "ok", "text": answer})
		return
	}
	msgs = []any{wrapPrompt(text)}
	rounds := 4
	if wrapping() != "" {
		rounds = 20 // a wrapping server loops longer than the provider's bound
	}
	for range rounds {
		msg, err := complete(ctx, cfg, key, msgs, pluginToolSpecs(s.home))
		if err != nil {
			fail(err)
			return
		}
		calls, _ := msg["tool_calls"].([]any)
		if len(calls) == 0 {
			msgs = append(msgs, msg)
			content, _ := msg["content"].(string)
			payload := map[string]any{"outcome": "ok", "text": content}
			if os.Getenv("DIALECT_LEAK") == "1" && s.profile != "" {
				payload["debug"] = launchEnv()
			}
			persist(s, msgs)
			sharedCache.put(text, content)
			c.event("reply.done", s.id, payload)
			return
		}
		msgs = append(msgs, msg)
		for _, raw := range calls {
			call, _ := raw.(map[string]any)
			fn, _ := call["function"].(map[string]any)
			name, _ := fn["name"].(string)
			argText, _ := fn["arguments"].(string)
			var args map[string]any
			_ = json.Unmarshal([]byte(argText), &args)
			c.event("step.begin", s.id, map[string]any{"tool": name})
			out := "unknown tool " + name
			if cmd, _ := args["cmd"].(string); name == "exec" && cmd != "" {
				out = shell(ctx, cfg.Terminal.Cwd, dotenv, cmd)
			} else if res, ok := callPlugin(ctx, s, cfg, dotenv, name, args); ok {
				out = res
			}
			c.event("step.end", s.id, map[string]any{"tool": name, "input": args})
			if wrapping() != "lose-results" {
				msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": call["id"], "content": out})
			}
		}
		if wrapping() != "" {
			msgs = append(msgs, map[string]any{"role": "user", "content": "runtime facts: the tools ran on dialectserver; continue"})
		}
	}
	fail(errors.New("too many tool rounds"))
}

// persist appends a turn's messages to the session's profile's state.db
// (SQLite, WAL), as real servers keep their sessions.
func persist(s *session, msgs []any) {
	path, more, err := stateDBOf(s)
	if err != nil {
		fmt.Fprintln(os.Stderr, "state.db:", err)
		return
	}
	msgs = append(msgs, more...)
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)")
	if err != nil {
		fmt.Fprintln(os.Stderr, "state.db:", err)
		return
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS messages (session TEXT, body TEXT)`); err != nil {
		fmt.Fprintln(os.Stderr, "state.db:", err)
		return
	}
	for _, m := range msgs {
		b, _ := json.Marshal(m)
		if _, err := db.Exec(`INSERT INTO messages VALUES (?, ?)`, s.id, string(b)); err != nil {
			fmt.Fprintln(os.Stderr, "state.db:", err)
		}
	}
}

func complete(ctx context.Context, cfg config, key string, msgs []any, more []any) (map[string]any, error) {
	body, _ := json.Marshal(map[string]any{
		"model": cfg.Model.Default, "messages": msgs,
		"tools": append([]any{map[string]any{"type": "function", "function": map[string]any{
			"name": "exec", "description": "run a shell command",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"cmd": map[string]any{"type": "string"}}},
		}}}, more...),
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.Model.BaseURL+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("provider: HTTP %d: %s", resp.StatusCode, data)
	}
	var out struct {
		Choices []struct {
			Message map[string]any `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(data, &out); err != nil || len(out.Choices) == 0 {
		return nil, fmt.Errorf("provider: bad reply %s", data)
	}
	return out.Choices[0].Message, nil
}

// shell runs cmd in cwd with the profile's .env over a minimal environment.
// DIALECT_TOOL_NS=1 runs it in a PID namespace of its own (bubblewrap),
// so every process it starts ends with the call, as a server that
// sandboxes each call does.
func shell(ctx context.Context, cwd string, dotenv map[string]string, cmd string) string {
	c := exec.CommandContext(ctx, "/bin/sh", "-c", cmd)
	if os.Getenv("DIALECT_TOOL_NS") == "1" {
		c = exec.CommandContext(ctx, "bwrap", "--die-with-parent", "--unshare-pid", "--dev-bind", "/", "/",
			"--proc", "/proc", "--chdir", cwd, "--", "/bin/sh", "-c", cmd)
	}
	c.Dir = cwd
	c.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range dotenv {
		c.Env = append(c.Env, k+"="+v)
	}
	out, err := c.CombinedOutput()
	if err != nil {
		return string(out) + "\nerror: " + err.Error()
	}
	return string(out)
}

func wrapping() string { return os.Getenv("DIALECT_WRAP") }

// wrapPrompt is the user message a prompt becomes: as it is, or wrapped
// in content parts with text before and after (DIALECT_WRAP).
func wrapPrompt(text string) map[string]any {
	switch wrapping() {
	case "":
		return map[string]any{"role": "user", "content": text}
	case "mangle":
		text = strings.ToLower(text)
	}
	return map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "text", "text": "[" + time.Now().UTC().Format(time.RFC1123) + "] " + text},
		map[string]any{"type": "text", "text": "runtime: dialectserver test build, pooled"},
	}}
}

// answerCache is DIALECT_LEAK=shared-cache's cache: answers by prompt
// text, shared by every tenant (the leak it seeds).
type answerCache struct {
	mu sync.Mutex
	m  map[string]string
}

var sharedCache answerCache

func (a *answerCache) get(text string) (string, bool) {
	if os.Getenv("DIALECT_LEAK") != "shared-cache" {
		return "", false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.m[text]
	return v, ok
}

func (a *answerCache) put(text, answer string) {
	if os.Getenv("DIALECT_LEAK") != "shared-cache" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[string]string{}
	}
	a.m[text] = answer
}
