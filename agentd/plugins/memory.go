package plugins

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/tenantcanary/tenantcanary/agentd/agent"
	"github.com/tenantcanary/tenantcanary/agentd/scope"
	"github.com/tenantcanary/tenantcanary/host"
	"github.com/tenantcanary/tenantcanary/plugin"
)

// memory is the profile's plugin memory providers as a session's memory:
// each is initialised once per session and plugin host (when the session
// starts, and again before the next call when a new host replaced the one
// that initialised it), asked (Prefetch) before every turn for text the
// turn's system prompt gets, given the turn (SyncTurn) after it, and shut
// down for the session when it ends. Each call runs in the profile's own
// host, as the session.
type memory struct {
	loader host.Loader
	names  []string
	log    *slog.Logger

	mu     sync.Mutex
	inited map[string]uint64 // session -> the host generation that initialised it
}

type memoryKey struct{}

// memoryOf is the profile's memory, made once per scope; nil when no
// plugin registered a memory provider.
func memoryOf(ctx context.Context, sc *scope.Scope, loader host.Loader) *memory {
	v, _ := sc.Value(memoryKey{}, func() (any, error) {
		names, err := providerNames(ctx, loader, host.KindMemory)
		if err != nil {
			return nil, err // not remembered: the next turn asks again
		}
		if len(names) == 0 {
			return (*memory)(nil), nil
		}
		return &memory{loader: loader, names: names, log: sc.Log, inited: map[string]uint64{}}, nil
	})
	m, _ := v.(*memory)
	return m
}

func (m *memory) provider(ctx context.Context, name string) (plugin.MemoryProvider, error) {
	return m.loader.MemoryProvider(ctx, name)
}

func (m *memory) warn(what, name, session string, err error) {
	if m.log != nil && !errors.Is(err, host.ErrBudgetExhausted) {
		m.log.Warn("plugins: memory provider "+what+" failed", "provider", name, "session", session, "err", err)
	}
}

// generation is the loader's current plugin host (1 for plugins loaded
// in-process, which never restart).
func (m *memory) generation() uint64 {
	if g, ok := m.loader.(interface{ Generation() uint64 }); ok {
		return g.Generation()
	}
	return 1
}

// ensureInit initialises every provider for the session unless the
// current host did already: a host that died took the providers' state
// with it, and the new host's providers have not seen the session. The
// lookups come first, so the generation is the host the calls go to.
func (m *memory) ensureInit(ctx context.Context, session string) {
	var provs []plugin.MemoryProvider
	for _, name := range m.names {
		p, err := m.provider(ctx, name)
		if err != nil {
			m.warn("lookup", name, session, err)
			return
		}
		provs = append(provs, p)
	}
	gen := m.generation()
	m.mu.Lock()
	done := m.inited[session] == gen
	m.mu.Unlock()
	if done {
		return
	}
	for i, p := range provs {
		if err := p.Initialize(ctx, session); err != nil {
			m.warn("initialize", m.names[i], session, err)
			return // not recorded: the next call tries again
		}
	}
	m.mu.Lock()
	m.inited[session] = gen
	m.mu.Unlock()
}

// Start implements agent.Memory.
func (m *memory) Start(ctx context.Context, env *agent.Env) {
	session := sessionOf(env)
	m.ensureInit(plugin.WithSession(ctx, session), session)
}

// End implements agent.Memory: it shuts every provider down for the
// session, if it was initialised, and forgets the session.
func (m *memory) End(ctx context.Context, env *agent.Env) {
	session := sessionOf(env)
	m.mu.Lock()
	_, inited := m.inited[session]
	delete(m.inited, session)
	m.mu.Unlock()
	if !inited {
		return
	}
	ctx = plugin.WithSession(ctx, session)
	for _, name := range m.names {
		p, err := m.provider(ctx, name)
		if s, ok := p.(plugin.Shutdowner); ok && err == nil {
			err = s.Shutdown(ctx, session) // optional: a v0.2.0 provider has none
		}
		if err != nil {
			m.warn("shutdown", name, session, err)
		}
	}
}

// Prefetch implements agent.Memory.
func (m *memory) Prefetch(ctx context.Context, env *agent.Env, query string) string {
	session := sessionOf(env)
	ctx = plugin.WithSession(ctx, session)
	m.ensureInit(ctx, session)
	var parts []string
	for _, name := range m.names {
		p, err := m.provider(ctx, name)
		if err != nil {
			m.warn("lookup", name, session, err)
			continue
		}
		out, err := p.Prefetch(ctx, query)
		if err != nil {
			m.warn("prefetch", name, session, err)
			continue
		}
		if out = strings.TrimSpace(out); out != "" {
			parts = append(parts, fmt.Sprintf("## Memory (%s)\n%s", name, out))
		}
	}
	return strings.Join(parts, "\n\n")
}

// Sync implements agent.Memory.
func (m *memory) Sync(ctx context.Context, env *agent.Env, user, assistant string) {
	session := sessionOf(env)
	ctx = plugin.WithSession(ctx, session)
	m.ensureInit(ctx, session) // the turn's tool calls may have found a new host
	for _, name := range m.names {
		p, err := m.provider(ctx, name)
		if err == nil {
			err = p.SyncTurn(ctx, user, assistant)
		}
		if err != nil {
			m.warn("sync", name, session, err)
		}
	}
}

func sessionOf(env *agent.Env) string {
	if env == nil {
		return ""
	}
	return env.Session
}
