package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/tenantcanary/tenantcanary/plugin"
)

// proxy is the server's handle on a provider object living in the host.
// Its reference is fenced by the host's generation: after a restart the
// proxy re-binds, by kind and name, to the object the new host loaded.
type proxy struct {
	m          *Manager
	kind, name string

	mu  sync.Mutex
	ref Ref
}

func (m *Manager) newProxy(ctx context.Context, kind, name string) (*proxy, error) {
	p := &proxy{m: m, kind: kind, name: name}
	h, err := m.ensure(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s provider %s: %w", kind, name, err)
	}
	if _, err := p.bind(h); err != nil {
		return nil, err
	}
	return p, nil
}

// bind gives the reference valid in host h, looking it up again when the
// proxy's is from another generation.
func (p *proxy) bind(h *hostProc) (Ref, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ref.Gen == h.gen && p.ref.ID != 0 {
		return p.ref, nil
	}
	h.mu.Lock()
	spec, ok := h.providers[p.kind+"/"+p.name]
	h.mu.Unlock()
	if !ok {
		return Ref{}, fmt.Errorf("%s provider %s: no plugin in the %s registered it: %w", p.kind, p.name, h.desc, ErrNotFound)
	}
	p.ref = spec.Ref
	return p.ref, nil
}

// call runs method in the host, once more (bound anew) when the reference
// is stale or the host died before the request reached it.
func (p *proxy) call(ctx context.Context, args providerArgs, out any) error {
	what := fmt.Sprintf("%s provider %s: %s", p.kind, p.name, args.Method)
	for attempt := 0; ; attempt++ {
		h, err := p.m.ensure(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if args.Ref, err = p.bind(h); err != nil {
			return err
		}
		raw, err := p.m.requestOn(ctx, h, what, opProvider, plugin.SessionID(ctx), args)
		if resend(ctx, attempt, err) || (errors.Is(err, ErrStaleRef) && attempt == 0) {
			continue
		}
		if err != nil {
			return err
		}
		if out == nil || len(raw) == 0 {
			return nil
		}
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("%s: decode the result: %v: %w", what, err, ErrProtocol)
		}
		return nil
	}
}

type memoryProxy struct{ *proxy }

// A memoryProxy is always a plugin.Shutdowner: the host calls the
// provider's Shutdown when it has one, and does nothing otherwise.
var (
	_ plugin.MemoryProvider = memoryProxy{}
	_ plugin.Shutdowner     = memoryProxy{}
)

func (p memoryProxy) Name() string { return p.name }

func (p memoryProxy) IsAvailable(ctx context.Context) bool {
	var ok bool
	return p.call(ctx, providerArgs{Method: "is_available"}, &ok) == nil && ok
}

func (p memoryProxy) Initialize(ctx context.Context, sessionID string) error {
	return p.call(ctx, providerArgs{Method: "initialize", SessionID: sessionID}, nil)
}

func (p memoryProxy) Prefetch(ctx context.Context, query string) (string, error) {
	var s string
	err := p.call(ctx, providerArgs{Method: "prefetch", Query: query}, &s)
	return s, err
}

func (p memoryProxy) SyncTurn(ctx context.Context, user, assistant string) error {
	return p.call(ctx, providerArgs{Method: "sync_turn", User: user, Assistant: assistant}, nil)
}

func (p memoryProxy) Shutdown(ctx context.Context, sessionID string) error {
	return p.call(ctx, providerArgs{Method: "shutdown", SessionID: sessionID}, nil)
}

type imageProxy struct{ *proxy }

var _ plugin.ImageGenProvider = imageProxy{}

func (p imageProxy) Name() string { return p.name }

func (p imageProxy) Generate(ctx context.Context, prompt string, options map[string]any) (map[string]any, error) {
	var out map[string]any
	err := p.call(ctx, providerArgs{Method: "generate", Prompt: prompt, Options: options}, &out)
	return out, err
}

type modelProxy struct {
	*proxy
	profile plugin.ModelProfile
}

var _ plugin.ModelProvider = modelProxy{}

// Profile is the profile data extracted at discovery; it never starts a
// host.
func (p modelProxy) Profile() plugin.ModelProfile { return p.profile }

func (p modelProxy) BuildExtraBody(ctx context.Context, sessionID string) (map[string]any, error) {
	var out map[string]any
	err := p.call(ctx, providerArgs{Method: "build_extra_body", SessionID: sessionID}, &out)
	return out, err
}

// MemoryProvider returns a proxy satisfying plugin.MemoryProvider whose
// methods run in the host; it keeps working across host restarts.
func (m *Manager) MemoryProvider(ctx context.Context, name string) (plugin.MemoryProvider, error) {
	p, err := m.newProxy(ctx, KindMemory, name)
	if err != nil {
		return nil, err
	}
	return memoryProxy{p}, nil
}

// ImageGenProvider returns a proxy satisfying plugin.ImageGenProvider whose
// methods run in the host.
func (m *Manager) ImageGenProvider(ctx context.Context, name string) (plugin.ImageGenProvider, error) {
	p, err := m.newProxy(ctx, KindImageGen, name)
	if err != nil {
		return nil, err
	}
	return imageProxy{p}, nil
}

// ModelProvider returns a proxy for a model provider the host loaded. Use
// ModelProviders to get them without starting a host.
func (m *Manager) ModelProvider(ctx context.Context, name string) (plugin.ModelProvider, error) {
	p, err := m.newProxy(ctx, KindModel, name)
	if err != nil {
		return nil, err
	}
	h, err := m.ensure(ctx)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	spec := h.providers[KindModel+"/"+name]
	h.mu.Unlock()
	mp := modelProxy{proxy: p}
	if spec.Profile != nil {
		mp.profile = *spec.Profile
	}
	return mp, nil
}
