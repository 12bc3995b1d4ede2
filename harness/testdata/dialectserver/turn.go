// A turn: the profile's config and .env, the provider call, the shell
// tool, and the stored transcript.

package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"
)

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
		done := map[string]any{"outcome": "ok", "text": answer}
		if staged() {
			done["state"] = "final"
		}
		c.event("reply.done", s.id, done)
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
		if os.Getenv("DIALECT_IDS") == "rewrite" {
			rewriteIDs(s, calls)
		}
		if len(calls) == 0 {
			msgs = append(msgs, msg)
			content, _ := msg["content"].(string)
			payload := map[string]any{"outcome": "ok", "text": content}
			if staged() {
				payload["state"] = "final"
			}
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
			if staged() {
				// The arguments below the top level, and a reply.done that
				// ends nothing (state delta) after every step.
				c.event("step.end", s.id, map[string]any{"step": map[string]any{"tool": name, "call": map[string]any{"input": args}}})
				c.event("reply.done", s.id, map[string]any{"state": "delta", "outcome": "ok", "text": "step " + name + " done"})
			} else {
				c.event("step.end", s.id, map[string]any{"tool": name, "input": args})
			}
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

// rewriteIDs gives the model's tool calls the server's own ids: the "-"
// characters dropped, a repeat in the session suffixed 2, 3, ...
func rewriteIDs(s *session, calls []any) {
	if s.ids == nil {
		s.ids = map[string]int{}
	}
	for _, raw := range calls {
		call, _ := raw.(map[string]any)
		id, _ := call["id"].(string)
		id = strings.ReplaceAll(id, "-", "")
		s.ids[id]++
		if n := s.ids[id]; n > 1 {
			id += strconv.Itoa(n)
		}
		call["id"] = id
	}
}

// staged: DIALECT_EVENTS=staged: a turn's events as some gateways send
// them: reply.done after every step with state "delta", the last with
// state "final", and a step's arguments nested below the top level
// (step.call.input).
func staged() bool { return os.Getenv("DIALECT_EVENTS") == "staged" }
