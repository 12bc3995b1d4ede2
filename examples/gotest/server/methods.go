package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// methods are the protocol's methods, by name.
var methods map[string]func(*conn, json.RawMessage) (any, error)

func init() {
	methods = map[string]func(*conn, json.RawMessage) (any, error){
		"session.create": (*conn).sessionCreate, "session.resume": (*conn).sessionResume, "session.close": (*conn).sessionClose,
		"prompt.submit": (*conn).promptSubmit,
		"config.set":    (*conn).configSet, "model.save_key": (*conn).saveKey,
		"profiles.create": (*conn).profilesCreate, "profiles.delete": (*conn).profilesDelete, "profiles.list": (*conn).profilesList,
		"cron.create": (*conn).cronCreate, "cron.trigger": (*conn).cronTrigger, "cron.list": (*conn).cronList,
	}
}

func (c *conn) sessionCreate(params json.RawMessage) (any, error) {
	var p struct {
		Profile string `json:"profile"`
	}
	prof, err := c.decodeProfile(params, &p, &p.Profile)
	if err != nil {
		return nil, err
	}
	stored := newID("st-")
	if err := prof.storeSession(stored); err != nil {
		return nil, err
	}
	return c.open(prof, stored, nil)
}

func (c *conn) sessionResume(params json.RawMessage) (any, error) {
	var p struct {
		SessionID string `json:"session_id"`
		Profile   string `json:"profile"`
	}
	prof, err := c.decodeProfile(params, &p, &p.Profile)
	if err != nil {
		return nil, err
	}
	history, err := prof.loadSession(p.SessionID)
	if errors.Is(err, errNoStoredSession) {
		return nil, errorf(codeUnknownSession, "no stored session %q in this profile", p.SessionID)
	}
	if err != nil {
		return nil, err
	}
	return c.open(prof, p.SessionID, history)
}

// open makes a live session of prof on c and answers its info.
func (c *conn) open(prof profile, stored string, history []message) (any, error) {
	cfg, err := prof.config()
	if err != nil {
		return nil, err
	}
	s := &session{id: newID("s-"), stored: stored, prof: prof, owner: c, history: history}
	c.pool.addSession(s)
	return map[string]any{"session_id": s.id, "stored_session_id": stored,
		"info": map[string]any{"model": cfg.Model.Default, "profile_name": prof.name, "cwd": cfg.Terminal.Cwd}}, nil
}

func (c *conn) sessionClose(params json.RawMessage) (any, error) {
	var p struct {
		SessionID string `json:"session_id"`
	}
	if err := decode(params, &p); err != nil {
		return nil, err
	}
	if _, err := c.pool.session(c, p.SessionID); err != nil {
		return nil, err
	}
	c.pool.closeSession(p.SessionID)
	return map[string]any{"ok": true}, nil
}

func (c *conn) promptSubmit(params json.RawMessage) (any, error) {
	var p struct {
		SessionID string `json:"session_id"`
		Text      string `json:"text"`
	}
	if err := decode(params, &p); err != nil {
		return nil, err
	}
	if p.Text == "" {
		return nil, errorf(codeBadParams, "prompt.submit: text is empty")
	}
	s, err := c.pool.session(c, p.SessionID)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy {
		return nil, errorf(codeConflict, "session %q is busy with a turn", s.id)
	}
	s.busy = true
	c.turns.Add(1)
	go c.turn(s, p.Text)
	return map[string]any{"status": "streaming"}, nil
}

// turn runs one turn of s, streaming its events to c, and stores it.
func (c *conn) turn(s *session, text string) {
	defer c.turns.Done()
	c.pool.life.RLock()
	defer c.pool.life.RUnlock()
	s.mu.Lock()
	history := s.history
	s.mu.Unlock()
	emit := func(typ string, payload map[string]any) { c.event(typ, s.id, payload) }
	emit("message.start", nil)
	if !c.pool.live(s) { // its profile was deleted since the turn was asked for
		emit("message.complete", map[string]any{"text": "the session's profile was deleted", "status": "error"})
		return
	}
	answer, added, err := c.pool.runTurn(c.ctx, s.prof, history, text, emit)
	if serr := s.prof.appendMessages(s.stored, added); err == nil {
		err = serr
	}
	s.mu.Lock()
	s.history = append(s.history, added...)
	s.busy = false
	s.mu.Unlock()
	if err != nil {
		emit("message.complete", map[string]any{"text": err.Error(), "status": "error"})
		return
	}
	emit("message.complete", map[string]any{"text": answer, "status": "complete"})
}

// address is how a settings call names its profile: by a session (which
// must be c's), by name, or neither (the launch profile).
type address struct {
	SessionID string `json:"session_id"`
	Profile   string `json:"profile"`
}

// addressed is the profile a settings call addresses.
func (c *conn) addressed(a address) (profile, error) {
	if a.SessionID != "" {
		s, err := c.pool.session(c, a.SessionID)
		if err != nil {
			return profile{}, err
		}
		return s.prof, nil
	}
	return c.pool.profile(a.Profile)
}

// decodeProfile decodes a call's params into p and returns the profile
// *name (a field of p) names: the launch profile when it is empty.
func (c *conn) decodeProfile(params json.RawMessage, p any, name *string) (profile, error) {
	if err := decode(params, p); err != nil {
		return profile{}, err
	}
	return c.pool.profile(*name)
}

// settingsCall answers a settings call: holding the pool's life lock
// (read) for the whole call, it decodes params into p, runs check on what
// was decoded, and calls do with the profile a (p's address) names.
func (c *conn) settingsCall(params json.RawMessage, p any, a *address, check func() error, do func(profile) (any, error)) (any, error) {
	c.pool.life.RLock()
	defer c.pool.life.RUnlock()
	if err := decode(params, p); err != nil {
		return nil, err
	}
	if err := check(); err != nil {
		return nil, err
	}
	prof, err := c.addressed(*a)
	if err != nil {
		return nil, err
	}
	return do(prof)
}

// configKeys are the keys config.set takes, and where each lives in
// config.yaml.
var configKeys = map[string]string{"cwd": "terminal.cwd", "prompt": "custom_prompt", "model": "model.default"}

func (c *conn) configSet(params json.RawMessage) (any, error) {
	var p struct {
		address
		Key   string `json:"key"`
		Value string `json:"value"`
	}
	var key string
	check := func() error {
		var ok bool
		if key, ok = configKeys[p.Key]; !ok {
			return errorf(codeBadParams, "config.set: unknown key %q (want cwd, prompt or model)", p.Key)
		}
		return nil
	}
	return c.settingsCall(params, &p, &p.address, check, func(prof profile) (any, error) {
		if p.Key == "cwd" {
			if _, err := c.pool.checkCwd(prof, p.Value); err != nil {
				return nil, errorf(codeBadParams, "config.set: %v", err)
			}
		}
		if err := prof.setConfig(key, p.Value); err != nil {
			return nil, err
		}
		return map[string]any{"ok": true, "key": key}, nil
	})
}

var slugRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

func (c *conn) saveKey(params json.RawMessage) (any, error) {
	var p struct {
		address
		Slug   string `json:"slug"`
		APIKey string `json:"api_key"`
	}
	check := func() error {
		if !slugRE.MatchString(p.Slug) || p.APIKey == "" {
			return errorf(codeBadParams, "model.save_key: want a slug of [a-z0-9_-] and an api_key")
		}
		return nil
	}
	return c.settingsCall(params, &p, &p.address, check, func(prof profile) (any, error) {
		name := strings.ToUpper(strings.ReplaceAll(p.Slug, "-", "_")) + "_API_KEY"
		if err := prof.setDotEnv(name, p.APIKey); err != nil {
			return nil, err
		}
		return map[string]any{"ok": true, "env": name}, nil
	})
}

func (c *conn) profilesCreate(params json.RawMessage) (any, error) {
	return c.profilesCall(params, func(name string) (any, error) {
		if !profileNameRE.MatchString(name) || name == launchName {
			return nil, errorf(codeBadParams, "profiles.create: bad name %q", name)
		}
		home := filepath.Join(c.pool.profilesDir(), name)
		if err := os.MkdirAll(c.pool.profilesDir(), 0o755); err != nil {
			return nil, fmt.Errorf("profiles.create: %w", err)
		}
		if err := os.Mkdir(home, 0o755); errors.Is(err, os.ErrExist) {
			return nil, errorf(codeConflict, "profile %q already exists", name)
		} else if err != nil {
			return nil, fmt.Errorf("profiles.create: %w", err)
		}
		// A new profile starts empty: no model, no key, nothing of the launch
		// profile's. Its owner configures it.
		prof := profile{name: name, home: home}
		if err := prof.writeFile("config.yaml", []byte("model: {}\n"), 0o644); err != nil {
			return nil, fmt.Errorf("profiles.create: %w", err)
		}
		return map[string]any{"ok": true, "name": name, "path": home}, nil
	})
}

func (c *conn) profilesDelete(params json.RawMessage) (any, error) {
	return c.profilesCall(params, func(name string) (any, error) {
		if name == "" || name == launchName {
			return nil, errorf(codeBadParams, "profiles.delete: the launch profile cannot be deleted")
		}
		prof, err := c.pool.profile(name)
		if err != nil {
			return nil, err
		}
		c.pool.dropSessionsIn(prof)
		if err := os.RemoveAll(prof.home); err != nil {
			return nil, fmt.Errorf("profiles.delete: %w", err)
		}
		return map[string]any{"ok": true, "name": name}, nil
	})
}

// profilesCall decodes the params {name} of a profiles call and runs do
// with the name, holding the pool's life lock all the while.
func (c *conn) profilesCall(params json.RawMessage, do func(name string) (any, error)) (any, error) {
	c.pool.life.Lock()
	defer c.pool.life.Unlock()
	var p struct {
		Name string `json:"name"`
	}
	if err := decode(params, &p); err != nil {
		return nil, err
	}
	return do(p.Name)
}

func (c *conn) profilesList(json.RawMessage) (any, error) {
	names, err := c.pool.profileNames()
	if err != nil {
		return nil, err
	}
	return map[string]any{"profiles": names}, nil
}
