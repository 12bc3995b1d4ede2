package scope

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/agentd/agent"
	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/homefs"
	"github.com/tenantcanary/tenantcanary/agentd/llm"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/store"
)

// Scope is one profile's runtime.
type Scope struct {
	Profile profile.Profile
	DB      store.State  // the profile's state.db, or its rows in the cluster's PostgreSQL
	Log     *slog.Logger // the profile's logs/agent.log

	baseEnv  []string
	logFile  *os.File
	http     *http.Client
	closeMu  sync.Mutex
	closed   bool
	borrowed bool       // DB belongs to another scope (the shared-state-db fault)
	pool     *Pool      // for the seeded faults' process-wide state; nil outside a pool
	faults   faults.Set // seeded faults (test-only)

	valMu  sync.Mutex
	values map[any]any // extension values (a profile's plugin loader, say)
	order  []any       // keys in creation order, closed in reverse

	ctx    context.Context // ends when the profile's deletion starts or the scope closes
	cancel context.CancelFunc

	// uses counts the work in flight (Pool.Use); drained is closed when it
	// falls to zero while a deletion waits. Both are guarded by pool.mu.
	uses    int
	drained chan struct{}

	opLog    *slog.Logger // the server's log, for what the operator must know
	warnMu   sync.Mutex
	ignoreds map[ignoredKeyID]bool // operator-only keys of the profile's own config already logged
}

// ignoredKeyID names an ignored operator-only key: the file and the key.
type ignoredKeyID struct{ File, Key string }

// Context ends when the profile's deletion starts (or the scope closes):
// work done for the profile derives from it, so a delete cancels it.
func (s *Scope) Context() context.Context { return s.ctx }

// Value returns the scope's extension value under key, made by init on
// first use; later callers get the same value. This is where per-profile
// extensions (the profile's plugin loader, say) live, so that nothing of a
// profile is kept in process-global state. A value that implements
// io.Closer is closed when the scope closes (in reverse creation order).
func (s *Scope) Value(key any, init func() (any, error)) (any, error) {
	s.valMu.Lock()
	defer s.valMu.Unlock()
	if v, ok := s.values[key]; ok {
		return v, nil
	}
	s.closeMu.Lock()
	closed := s.closed
	s.closeMu.Unlock()
	if closed {
		return nil, fmt.Errorf("scope of profile %q is closed", s.Profile.Name)
	}
	v, err := init()
	if err != nil {
		return nil, err
	}
	if s.values == nil {
		s.values = map[any]any{}
	}
	s.values[key] = v
	s.order = append(s.order, key)
	return v, nil
}

// Forget closes (when it is an io.Closer) and drops the extension values
// under keys: the next Value of a key makes it anew from the home as it
// is then (a plugin reload).
func (s *Scope) Forget(keys ...any) error {
	s.valMu.Lock()
	defer s.valMu.Unlock()
	var errs []error
	for _, key := range keys {
		v, ok := s.values[key]
		if !ok {
			continue
		}
		delete(s.values, key)
		s.order = slices.DeleteFunc(s.order, func(k any) bool { return k == key })
		if c, ok := v.(io.Closer); ok {
			if err := c.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func (s *Scope) closeValues() error {
	s.valMu.Lock()
	defer s.valMu.Unlock()
	var errs []error
	for i := len(s.order) - 1; i >= 0; i-- {
		if c, ok := s.values[s.order[i]].(io.Closer); ok {
			if err := c.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	s.values, s.order = nil, nil
	return errors.Join(errs...)
}

// Open opens a profile's scope: its home skeleton, state.db and log.
func Open(ctx context.Context, p profile.Profile, baseEnv []string) (*Scope, error) {
	return open(ctx, p, baseEnv, nil, nil)
}

// open opens a scope; a non-nil shared DB is used instead of the profile's
// own (the shared-state-db fault) and is not closed with the scope; a
// non-nil state opens the profile's state in place of its state.db
// (cluster mode: see Pool.SetState).
func open(ctx context.Context, p profile.Profile, baseEnv []string, shared store.State, state StateOpener) (*Scope, error) {
	// The skeleton fills a home in; it never makes one: a home renamed
	// aside by a deletion stays gone.
	if !homeExists(p.Home) {
		return nil, fmt.Errorf("open scope: %w %q (no home at %s)", profile.ErrUnknownProfile, p.Name, p.Home)
	}
	if err := p.Skeleton(); err != nil {
		return nil, fmt.Errorf("open scope of profile %q: %w", p.Name, err)
	}
	lf, err := p.FS().OpenFile("logs/agent.log", os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open log of profile %q: %w", p.Name, err)
	}
	db := shared
	switch {
	case db != nil:
	case state != nil:
		db, err = state(ctx, p)
		if err != nil {
			lf.Close()
			return nil, fmt.Errorf("open scope of profile %q: %w", p.Name, err)
		}
	default:
		db, err = store.OpenIn(ctx, p.FS(), "state.db")
		if err != nil {
			lf.Close()
			return nil, fmt.Errorf("open scope of profile %q: %w", p.Name, err)
		}
	}
	transport := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 5 * time.Minute,
		Proxy:                 nil, // a tenant's key never travels through a proxy named in agentd's environment
	}
	life, cancel := context.WithCancel(context.Background()) // the profile's work, until its deletion
	s := &Scope{
		ctx:      life,
		cancel:   cancel,
		Profile:  p,
		DB:       db,
		Log:      slog.New(slog.NewTextHandler(lf, &slog.HandlerOptions{Level: slog.LevelDebug})).With("profile", p.Name),
		baseEnv:  append([]string(nil), baseEnv...),
		logFile:  lf,
		http:     &http.Client{Transport: transport},
		borrowed: shared != nil,
	}
	return s, nil
}

// Close closes the database and the log. Safe to call twice.
func (s *Scope) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	s.closeMu.Unlock()
	s.cancel()
	verr := s.closeValues() // extensions first: they may still use the log
	if t, ok := s.http.Transport.(*http.Transport); ok {
		t.CloseIdleConnections()
	}
	var err error
	if !s.borrowed {
		err = s.DB.Close()
	}
	if lerr := s.logFile.Close(); err == nil && lerr != nil {
		err = fmt.Errorf("close log of profile %q: %w", s.Profile.Name, lerr)
	}
	return errors.Join(verr, err)
}

// LogWriter is the profile's log file, for text that is not slog records
// (what a plugin prints, copied from its host's stderr).
func (s *Scope) LogWriter() io.Writer { return s.logFile }

// Snapshot is a profile's configuration and environment as read now.
type Snapshot struct {
	Config  *profile.Config
	Env     profile.Env
	ToolEnv []string // the environment of the profile's tool subprocesses
	Key     string   // the provider key (never log it: use KeyFingerprint)
}

// KeyFingerprint identifies the key without revealing it.
func (s *Snapshot) KeyFingerprint() string { return Fingerprint(s.Key) }

// Fingerprint is a short, one-way identifier of a secret for logs.
func Fingerprint(secret string) string {
	if secret == "" {
		return "none"
	}
	sum := sha256.Sum256([]byte(secret))
	return "sha256:" + hex.EncodeToString(sum[:6])
}

// Load reads the profile's config and .env now, so a write made since the
// last turn is seen by the next one.
func (s *Scope) Load() (*Snapshot, error) {
	cfg, err := s.Profile.LoadConfig()
	if err != nil {
		return nil, err
	}
	env, err := s.Profile.LoadEnv()
	if err != nil {
		return nil, err
	}
	s.logIgnored(cfg.Ignored)
	snap := &Snapshot{Config: cfg, Env: env, ToolEnv: profile.ToolEnv(s.baseEnv, s.Profile, env)}
	if cfg.Model.KeyEnv != "" {
		snap.Key, _ = env.Lookup(cfg.Model.KeyEnv)
	}
	if len(s.faults) > 0 {
		if err := s.seedLoadFaults(snap); err != nil {
			return nil, err
		}
	}
	return snap, nil
}

// logIgnored logs, once per file and key for the scope's life, each
// operator-only key the profile's own config.yaml set and that was
// ignored: on the server's log (the operator's), else the profile's.
func (s *Scope) logIgnored(keys []profile.IgnoredKey) {
	if len(keys) == 0 {
		return
	}
	log := s.opLog
	if log == nil {
		log = s.Log
	}
	s.warnMu.Lock()
	defer s.warnMu.Unlock()
	for _, k := range keys {
		id := ignoredKeyID{k.File, k.Key}
		if s.ignoreds[id] {
			continue
		}
		if s.ignoreds == nil {
			s.ignoreds = map[ignoredKeyID]bool{}
		}
		s.ignoreds[id] = true
		log.Warn("operator-only key in a profile's own config ignored", "profile", k.Profile, "file", k.File, "key", k.Key)
	}
}

// seedLoadFaults applies the seeded faults that corrupt what a profile
// reads (test-only; see package faults).
func (s *Scope) seedLoadFaults(snap *Snapshot) error {
	if s.faults.Has(faults.TokenInToolEnv) {
		// The bug: the serve token passes to the tools.
		for _, kv := range s.baseEnv {
			if strings.HasPrefix(kv, "AGENTD_SESSION_TOKEN=") {
				snap.ToolEnv = append(snap.ToolEnv, kv)
			}
		}
	}
	if s.faults.Has(faults.DotenvIntoProcess) {
		// The bug: the .env lands in the process environment, and tools
		// inherit the process environment.
		for _, v := range snap.Env {
			_ = os.Setenv(v.Name, v.Value)
		}
		snap.ToolEnv = overlay(os.Environ(), s.Profile, snap.Env)
	}
	if s.faults.Has(faults.LaunchEnvBleed) && s.pool != nil && s.Profile.Name != profile.LaunchName {
		// The bug: the launch profile's .env is loaded under every profile's.
		launch, err := s.pool.homes.Get("")
		if err != nil {
			return err
		}
		lenv, err := launch.LoadEnv()
		if err != nil {
			return err
		}
		snap.ToolEnv = profile.ToolEnv(s.baseEnv, s.Profile, append(append(profile.Env{}, lenv...), snap.Env...))
	}
	if s.faults.Has(faults.SharedCredential) && s.pool != nil && s.Profile.Name != "" {
		// The bug: a process-wide key cache keyed by the variable's name.
		s.pool.mu.Lock()
		if cached, ok := s.pool.credCache[snap.Config.Model.KeyEnv]; ok {
			snap.Key = cached
		} else {
			s.pool.credCache[snap.Config.Model.KeyEnv] = snap.Key
		}
		s.pool.mu.Unlock()
	}
	return nil
}

// overlay is environ (unscrubbed) with env and the profile's homes on top.
func overlay(environ []string, p profile.Profile, env profile.Env) []string {
	m := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	for _, v := range env {
		m[v.Name] = v.Value
	}
	m["HOME"], m["AGENTD_HOME"] = p.Home, p.Home
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// Client is an LLM client for the profile's provider, with its key.
func (s *Scope) Client(snap *Snapshot) *llm.Client {
	return &llm.Client{
		BaseURL:    snap.Config.Model.BaseURL,
		APIKey:     snap.Key,
		MaxRetries: snap.Config.MaxRetries(),
		HTTP:       s.http,
		Backoff:    func(n int) time.Duration { return min(100*time.Millisecond<<(n-1), 5*time.Second) },
	}
}

// SystemPrompt builds the profile's system prompt: SOUL.md, then
// memories/MEMORY.md when memory is enabled, then custom_prompt.
func (s *Scope) SystemPrompt(cfg *profile.Config) (string, error) {
	home := s.Profile.FS()
	soul, err := readOptional(home, "SOUL.md")
	if err != nil {
		return "", err
	}
	var memory string
	if cfg.MemoryEnabled() {
		if memory, err = readOptional(home, "memories/MEMORY.md"); err != nil {
			return "", err
		}
	}
	custom := cfg.CustomPrompt
	if s.Profile.Faults.Has(faults.TenantTextAsPath) {
		custom = fileRefsFault(s.Profile, custom)
	}
	return agent.SystemPrompt(soul, memory, custom), nil
}

// fileRefsFault is the tenant-text-as-path fault's half in the system
// prompt: every word of the custom prompt that is @<path> (absolute, or
// relative to the home) is replaced by that file's content, read by plain
// path, following links. agentd itself reads nothing a prompt names.
func fileRefsFault(p profile.Profile, prompt string) string {
	words := strings.Fields(prompt)
	for i, w := range words {
		ref, ok := strings.CutPrefix(w, "@")
		if !ok || ref == "" {
			continue
		}
		if !filepath.IsAbs(ref) {
			ref = p.File(ref)
		}
		if data, err := os.ReadFile(ref); err == nil { // the bug: a path the tenant wrote
			words[i] = string(data)
		}
	}
	return strings.Join(words, " ")
}

// readOptional reads a home file through the home (no link followed); a
// missing one is empty.
func readOptional(home homefs.Home, name string) (string, error) {
	b, err := home.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	return string(b), nil
}
