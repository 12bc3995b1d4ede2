package main

// The dialect server's shared-config mode, as gateways keep their agents:
// with DIALECT_SHARED_CONFIG naming one YAML file, every agent is a
// section of that file, reloaded whenever it changes, and the per-profile
// homes' config.yaml and .env are not read:
//
//	agents:
//	  <id>: {default: true|false, home: DIR, workdir: DIR, provider: NAME, model: M, env: {VAR: value}}
//	providers:
//	  <name>: {base_url: URL, api_key: KEY}
//
// The agent marked default serves a session that names no agent (or one
// the file does not have). An agent's state (its sessions database,
// sessions.sqlite) lives in <DIALECT_STATE>/agents/<id>, apart from its
// home; its tools get the section's env. `profile rm NAME` removes the
// agent's state folder as well as its home.
//
// The leak switches hold here too: DIALECT_LEAK=1 puts the default agent's
// env in a named agent's reply.done; DIALECT_LEAK=launch-env gives a named
// agent the default agent's model and provider key. One more is this
// mode's own: DIALECT_LEAK=config-snapshot stores, with every turn, a copy
// of the whole shared config in the agent's sessions database (every other
// agent's key and workdir at rest in its state folder).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"
)

// sharedConfigPath is the shared config file, "" in the per-home mode.
func sharedConfigPath() string { return os.Getenv("DIALECT_SHARED_CONFIG") }

func sharedMode() bool { return sharedConfigPath() != "" }

type sharedAgent struct {
	Default  bool              `yaml:"default"`
	Home     string            `yaml:"home"`
	Workdir  string            `yaml:"workdir"`
	Provider string            `yaml:"provider"`
	Model    string            `yaml:"model"`
	Env      map[string]string `yaml:"env"`
}

type sharedProvider struct {
	BaseURL string `yaml:"base_url"`
	APIKey  string `yaml:"api_key"`
}

type sharedDoc struct {
	Agents    map[string]sharedAgent    `yaml:"agents"`
	Providers map[string]sharedProvider `yaml:"providers"`
	raw       []byte
}

// sharedCfg is the shared config as last read, and what the file was
// then: it is read again when its size, time or inode changes.
var sharedCfg struct {
	mu   sync.Mutex
	doc  *sharedDoc
	size int64
	mod  time.Time
	ino  uint64
	// backups counts the copies DIALECT_SHARED_BACKUP=1 made.
	backups int
	// changeSeen is when a slow reload (DIALECT_SHARED_RELOAD_DELAY) first
	// saw the file changed.
	changeSeen time.Time
}

// loadShared returns the shared config, reloaded if it changed.
func loadShared() (*sharedDoc, error) {
	path := sharedConfigPath()
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("shared config: %w", err)
	}
	var ino uint64
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		ino = sys.Ino
	}
	sharedCfg.mu.Lock()
	defer sharedCfg.mu.Unlock()
	if c := &sharedCfg; c.doc != nil && c.size == st.Size() && c.mod.Equal(st.ModTime()) && c.ino == ino {
		return c.doc, nil
	}
	if d, err := time.ParseDuration(os.Getenv("DIALECT_SHARED_RELOAD_DELAY")); err == nil && sharedCfg.doc != nil {
		// A slow reload: the old config serves until the change is d old,
		// then the server says it reloaded.
		if sharedCfg.changeSeen.IsZero() {
			sharedCfg.changeSeen = time.Now()
		}
		if time.Since(sharedCfg.changeSeen) < d {
			return sharedCfg.doc, nil
		}
		sharedCfg.changeSeen = time.Time{}
		defer fmt.Fprintln(os.Stderr, "reloaded shared config")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("shared config: %w", err)
	}
	doc := &sharedDoc{raw: data}
	if err := yaml.Unmarshal(data, doc); err != nil {
		return nil, fmt.Errorf("shared config %s: %w", path, err)
	}
	sharedCfg.doc, sharedCfg.size, sharedCfg.mod, sharedCfg.ino = doc, st.Size(), st.ModTime(), ino
	if os.Getenv("DIALECT_SHARED_BACKUP") == "1" {
		// A copy of every version it loaded, beside the file, as some
		// servers keep: every tenant's section (secrets too) in it.
		sharedCfg.backups++
		bak := fmt.Sprintf("%s.bak.%d", path, sharedCfg.backups)
		if err := os.WriteFile(bak, data, 0o600); err != nil {
			fmt.Fprintln(os.Stderr, "shared config backup:", err)
		}
	}
	return doc, nil
}

// defaultAgent is the id of the agent marked default.
func (d *sharedDoc) defaultAgent() (string, bool) {
	for id, a := range d.Agents {
		if a.Default {
			return id, true
		}
	}
	return "", false
}

// agentID is the id of the agent a session of profile serves ("": the
// default agent).
func (d *sharedDoc) agentID(profile string) (string, error) {
	if profile != "" {
		if _, ok := d.Agents[profile]; ok {
			return profile, nil
		}
	}
	id, ok := d.defaultAgent()
	if !ok {
		return "", errors.New("shared config: no agent is marked default")
	}
	return id, nil
}

// sharedFind is findAgent in the shared mode: the agent's home and the
// profile the session is of ("" for the default agent).
func sharedFind(who string) (home, profile string) {
	doc, err := loadShared()
	if err != nil {
		return launchHome(), ""
	}
	if a, ok := doc.Agents[who]; ok && who != "" && !doc.Agents[who].Default {
		return a.Home, who
	}
	if id, ok := doc.defaultAgent(); ok {
		return doc.Agents[id].Home, ""
	}
	return launchHome(), ""
}

// sharedSetup is agentSetup in the shared mode: the session's agent's
// config and tool environment from its section, and its provider key.
func sharedSetup(profile string) (cfg config, env map[string]string, key string, err error) {
	doc, err := loadShared()
	if err != nil {
		return cfg, nil, "", err
	}
	id, err := doc.agentID(profile)
	if err != nil {
		return cfg, nil, "", err
	}
	a := doc.Agents[id]
	p, ok := doc.Providers[a.Provider]
	if !ok {
		return cfg, nil, "", fmt.Errorf("shared config: agent %s names provider %q, which it does not have", id, a.Provider)
	}
	cfg.Model.BaseURL, cfg.Model.Default, cfg.Model.Owner, cfg.Terminal.Cwd = p.BaseURL, a.Model, id, a.Workdir
	key = p.APIKey
	if launchEnvLeak() && profile != "" {
		if def, ok := doc.defaultAgent(); ok {
			cfg.Model.Default = doc.Agents[def].Model
			key = doc.Providers[doc.Agents[def].Provider].APIKey
		}
	}
	env = map[string]string{}
	for k, v := range a.Env {
		env[k] = v
	}
	return cfg, env, key, nil
}

// sharedLaunchEnv is the default agent's env (the DIALECT_LEAK=1 leak).
func sharedLaunchEnv() map[string]string {
	doc, err := loadShared()
	if err != nil {
		return nil
	}
	id, ok := doc.defaultAgent()
	if !ok {
		return nil
	}
	return doc.Agents[id].Env
}

// stateRoot is the folder of the agents' state folders.
func stateRoot() string { return os.Getenv("DIALECT_STATE") }

// stateDBOf is where a session's turns are stored, and what else is
// stored with them: <home>/state.db, or in the shared mode the agent's
// sessions.sqlite in its state folder (made here), with a copy of the
// whole shared config under DIALECT_LEAK=config-snapshot.
func stateDBOf(s *session) (string, []any, error) {
	if !sharedMode() {
		return filepath.Join(s.home, "state.db"), nil, nil
	}
	if stateRoot() == "" {
		return "", nil, errors.New("DIALECT_STATE is not set")
	}
	doc, err := loadShared()
	if err != nil {
		return "", nil, err
	}
	id, err := doc.agentID(s.profile)
	if err != nil {
		return "", nil, err
	}
	dir := filepath.Join(stateRoot(), "agents", id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, err
	}
	var more []any
	if os.Getenv("DIALECT_LEAK") == "config-snapshot" {
		more = append(more, map[string]any{"role": "system", "content": "config snapshot: " + string(doc.raw)})
	}
	return filepath.Join(dir, "sessions.sqlite"), more, nil
}

// sharedRemove removes agent name's state folder (profile rm).
func sharedRemove(name string) error {
	if stateRoot() == "" || name == "" || strings.ContainsAny(name, "/\\") || name == "." || name == ".." {
		return nil
	}
	return os.RemoveAll(filepath.Join(stateRoot(), "agents", name))
}

// watchShared reloads the shared config on change until ctx ends, as a
// server that watches its config does (a slow reload then says so on its
// own, with no request to trigger it).
func watchShared(ctx context.Context) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			_, _ = loadShared()
		}
	}
}
