package plugins

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"

	"github.com/tenantcanary/tenantcanary/agentd/agent"
	"github.com/tenantcanary/tenantcanary/agentd/scope"
	"github.com/tenantcanary/tenantcanary/host"
	"github.com/tenantcanary/tenantcanary/plugin"
)

// memory is the profile's plugin memory providers as a session's memory:
// each is initialised once per session (when it starts, or before its first
// turn), asked (Prefetch) before every turn for text the turn's system
// prompt gets, given the turn (SyncTurn) after it, and shut down for the
// session when it ends. Each call runs in the profile's own host, as the
// session.
type memory struct {
	loader host.Loader
	names  []string
	log    *slog.Logger

	mu     sync.Mutex
	inited map[string]bool // sessions initialised
}

type memoryKey struct{}

// memoryOf is the profile's memory, made once per scope; nil when no
// plugin registered a memory provider.
func memoryOf(ctx context.Context, sc *scope.Scope, loader host.Loader) *memory {
	v, _ := sc.Value(memoryKey{}, func() (any, error) {
		ps, err := loader.Plugins(ctx)
		if err != nil {
			return nil, err // not remembered: the next turn asks again
		}
		var names []string
		for _, p := range ps {
			for _, pr := range p.Providers {
				if pr.Kind == host.KindMemory {
					names = append(names, pr.Name)
				}
			}
		}
		if len(names) == 0 {
			return (*memory)(nil), nil
		}
		sort.Strings(names)
		return &memory{loader: loader, names: names, log: sc.Log, inited: map[string]bool{}}, nil
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

// Start implements agent.Memory: it initialises every provider for the
// session, once.
func (m *memory) Start(ctx context.Context, env *agent.Env) {
	session := sessionOf(env)
	m.mu.Lock()
	first := !m.inited[session]
	m.inited[session] = true
	m.mu.Unlock()
	if !first {
		return
	}
	ctx = plugin.WithSession(ctx, session)
	for _, name := range m.names {
		p, err := m.provider(ctx, name)
		if err == nil {
			err = p.Initialize(ctx, session)
		}
		if err != nil {
			m.warn("initialize", name, session, err)
		}
	}
}

// End implements agent.Memory: it shuts every provider down for the
// session, if it was initialised, and forgets the session.
func (m *memory) End(ctx context.Context, env *agent.Env) {
	session := sessionOf(env)
	m.mu.Lock()
	inited := m.inited[session]
	delete(m.inited, session)
	m.mu.Unlock()
	if !inited {
		return
	}
	ctx = plugin.WithSession(ctx, session)
	for _, name := range m.names {
		p, err := m.provider(ctx, name)
		if err == nil {
			err = p.Shutdown(ctx, session)
		}
		if err != nil {
			m.warn("shutdown", name, session, err)
		}
	}
}

// Prefetch implements agent.Memory.
func (m *memory) Prefetch(ctx context.Context, env *agent.Env, query string) string {
	m.Start(ctx, env) // a session the server did not start (a nested call's, say)
	session := sessionOf(env)
	ctx = plugin.WithSession(ctx, session)
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
