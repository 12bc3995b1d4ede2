package main

// The dialect server's plugin format: a plugin is a folder
// <home>/plugins/<name>/ holding plugin.json ({"name", "command": argv
// relative to the folder, "tools": [{"name", "description"}]}) and the
// executable it names. A tenant's config.yaml enables plugins
// (plugins.enabled: [names]) and may confine their hosts
// (plugins.sandbox: bwrap). Each enabled plugin runs as one host process
// per tenant home, started at its first call, in the home, with PATH,
// HOME and the home's .env as its whole environment, speaking JSON lines
// on stdin and stdout:
//
//	server -> host  {"id": N, "tool": T, "args": {...}}          a tool call
//	host -> server  {"id": N, "result": "text"} | {"id": N, "error": "..."}
//	host -> server  {"ask": K, "op": OP, "args": {...}}          during call N
//	server -> host  {"answer": K, "result": ...} | {"answer": K, "error": "..."}
//
// An ask runs as the session whose call is in flight: op exec{cmd} runs
// the shell tool in the session's shell, state.get{key} and
// state.set{key, value} keep values in the session's state. A host that
// dies costs the call in flight its error; the next call starts a new
// one. The server's stop ends every host.
//
// Leak switches (DIALECT_PLUGIN_LEAK, comma-separated), the plugin
// scenarios' positive controls:
//
//	shared-host  one host for every tenant: the first tenant's
//	server-env   a host gets the server's whole environment (its token among it)
//	unconfined   plugins.sandbox is ignored: a host sees every home
//	tenant-state state is kept per host, not per session

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
)

func pluginLeak(name string) bool {
	return slices.Contains(strings.Split(os.Getenv("DIALECT_PLUGIN_LEAK"), ","), name)
}

// pluginManifest is a plugin's plugin.json.
type pluginManifest struct {
	Name    string   `json:"name"`
	Command []string `json:"command"`
	Tools   []struct {
		Name        string `json:"name"`
		Description string `json:"description"`
	} `json:"tools"`
	dir string
}

// pluginConfig is the plugins block of a tenant's config.yaml.
type pluginConfig struct {
	Plugins struct {
		Enabled []string `yaml:"enabled"`
		Sandbox string   `yaml:"sandbox"`
	} `yaml:"plugins"`
}

// enabledPlugins reads the manifests of the plugins home enables.
func enabledPlugins(home string) ([]pluginManifest, pluginConfig) {
	var pc pluginConfig
	if data, err := os.ReadFile(filepath.Join(home, "config.yaml")); err == nil {
		_ = yaml.Unmarshal(data, &pc)
	}
	var out []pluginManifest
	for _, name := range pc.Plugins.Enabled {
		dir := filepath.Join(home, "plugins", name)
		data, err := os.ReadFile(filepath.Join(dir, "plugin.json"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "plugin", name+":", err)
			continue
		}
		var m pluginManifest
		if err := json.Unmarshal(data, &m); err != nil || len(m.Command) == 0 {
			fmt.Fprintf(os.Stderr, "plugin %s: bad plugin.json (%v)\n", name, err)
			continue
		}
		m.dir = dir
		out = append(out, m)
	}
	return out, pc
}

// pluginToolSpecs are the tools of home's plugins, as a completion request
// offers them.
func pluginToolSpecs(home string) []any {
	ms, _ := enabledPlugins(home)
	var out []any
	for _, m := range ms {
		for _, t := range m.Tools {
			out = append(out, map[string]any{"type": "function", "function": map[string]any{
				"name": t.Name, "description": t.Description,
				"parameters": map[string]any{"type": "object"},
			}})
		}
	}
	return out
}

// pluginHost is one running plugin host.
type pluginHost struct {
	call   sync.Mutex // one call at a time
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  *bufio.Scanner
	dead   chan struct{}
	nextID int
}

// pluginHosts are the server's running hosts, by home and plugin, and the
// plugins' state, by session and key.
type pluginHosts struct {
	mu    sync.Mutex
	hosts map[string]*pluginHost
	state map[string]map[string]any
}

var plugins = &pluginHosts{hosts: map[string]*pluginHost{}, state: map[string]map[string]any{}}

// callPlugin runs tool as session s when one of its home's plugins has it;
// ok is false when none does.
func callPlugin(ctx context.Context, s *session, cfg config, dotenv map[string]string, tool string, args map[string]any) (out string, ok bool) {
	ms, pc := enabledPlugins(s.home)
	for _, m := range ms {
		for _, t := range m.Tools {
			if t.Name != tool {
				continue
			}
			res, err := plugins.call(ctx, s, cfg, dotenv, m, pc, tool, args)
			if err != nil {
				return "plugin error: " + err.Error(), true
			}
			return res, true
		}
	}
	return "", false
}

func (p *pluginHosts) host(s *session, dotenv map[string]string, m pluginManifest, pc pluginConfig) (*pluginHost, error) {
	key := s.home + "\x00" + m.Name
	if pluginLeak("shared-host") {
		key = m.Name
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.hosts[key]; h != nil {
		select {
		case <-h.dead:
		default:
			return h, nil
		}
	}
	h, err := startHost(s.home, dotenv, m, pc)
	if err != nil {
		return nil, err
	}
	p.hosts[key] = h
	return h, nil
}

// startHost starts m's host for home: in the home, with its .env, under
// bubblewrap when the home asks for the sandbox.
func startHost(home string, dotenv map[string]string, m pluginManifest, pc pluginConfig) (*pluginHost, error) {
	argv := append([]string{}, m.Command...)
	if !filepath.IsAbs(argv[0]) {
		argv[0] = filepath.Join(m.dir, argv[0])
	}
	if pc.Plugins.Sandbox == "bwrap" && !pluginLeak("unconfined") {
		// Every home is hidden but the host's own; its own processes are
		// all it sees, and all of them end with it.
		box := []string{"bwrap", "--die-with-parent", "--unshare-pid", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
			"--tmpfs", filepath.Dir(launchHome()), "--bind", home, home}
		if home == launchHome() {
			box = append(box, "--tmpfs", profilesRoot())
		}
		argv = append(append(box, "--chdir", home, "--"), argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = home
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}
	if pluginLeak("server-env") {
		cmd.Env = os.Environ()
	}
	for k, v := range dotenv {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start plugin %s: %w", m.Name, err)
	}
	h := &pluginHost{cmd: cmd, stdin: stdin, lines: bufio.NewScanner(stdout), dead: make(chan struct{})}
	h.lines.Buffer(make([]byte, 0, 64*1024), 16<<20)
	go func() {
		_ = cmd.Wait()
		close(h.dead)
	}()
	return h, nil
}

// call runs one tool call in m's host for s, answering its asks as s.
func (p *pluginHosts) call(ctx context.Context, s *session, cfg config, dotenv map[string]string, m pluginManifest, pc pluginConfig, tool string, args map[string]any) (string, error) {
	h, err := p.host(s, dotenv, m, pc)
	if err != nil {
		return "", err
	}
	h.call.Lock()
	defer h.call.Unlock()
	h.nextID++
	id := h.nextID
	if err := h.send(map[string]any{"id": id, "tool": tool, "args": args}); err != nil {
		return "", fmt.Errorf("plugin %s: %w", m.Name, err)
	}
	stateKey := s.id
	if pluginLeak("tenant-state") {
		stateKey = s.home
	}
	for h.lines.Scan() {
		var msg struct {
			ID     int            `json:"id"`
			Result string         `json:"result"`
			Error  string         `json:"error"`
			Ask    int            `json:"ask"`
			Op     string         `json:"op"`
			Args   map[string]any `json:"args"`
		}
		if err := json.Unmarshal(h.lines.Bytes(), &msg); err != nil {
			return "", fmt.Errorf("plugin %s: bad line %q: %w", m.Name, h.lines.Text(), err)
		}
		if msg.Ask == 0 {
			if msg.ID != id {
				return "", fmt.Errorf("plugin %s: answer to call %d during call %d", m.Name, msg.ID, id)
			}
			if msg.Error != "" {
				return "", errors.New(msg.Error)
			}
			return msg.Result, nil
		}
		answer := map[string]any{"answer": msg.Ask}
		switch msg.Op {
		case "exec":
			cmd, _ := msg.Args["cmd"].(string)
			answer["result"] = shell(ctx, cfg.Terminal.Cwd, dotenv, cmd)
		case "state.get", "state.set":
			key, _ := msg.Args["key"].(string)
			p.mu.Lock()
			st := p.state[stateKey]
			if st == nil {
				st = map[string]any{}
				p.state[stateKey] = st
			}
			if msg.Op == "state.set" {
				st[key] = msg.Args["value"]
			}
			answer["result"] = st[key]
			p.mu.Unlock()
		default:
			answer["error"] = "unknown op " + msg.Op
		}
		if err := h.send(answer); err != nil {
			return "", fmt.Errorf("plugin %s: %w", m.Name, err)
		}
	}
	return "", fmt.Errorf("plugin %s: its host ended during call %d (%v)", m.Name, id, h.lines.Err())
}

func (h *pluginHost) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = h.stdin.Write(append(b, '\n'))
	return err
}

// stopPlugins ends every host (the server's stop) and waits for each.
func stopPlugins() {
	plugins.mu.Lock()
	hosts := plugins.hosts
	plugins.hosts = map[string]*pluginHost{}
	plugins.mu.Unlock()
	for _, h := range hosts {
		_ = h.stdin.Close()
		_ = h.cmd.Process.Kill()
		<-h.dead
	}
}
