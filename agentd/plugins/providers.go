package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/tenantcanary/tenantcanary/agentd/agent"
	"github.com/tenantcanary/tenantcanary/agentd/llm"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/scope"
	"github.com/tenantcanary/tenantcanary/host"
	"github.com/tenantcanary/tenantcanary/plugin"
)

// modelProvider is a plugin's model provider as the profile's LLM provider
// (model.provider: plugin:<name>): the plugin's profile gives the base URL
// and key variables model.base_url and model.key_env leave unset, and its
// BuildExtraBody, run in the profile's own plugins as the session, adds
// fields to the session's requests.
type modelProvider struct {
	sc     *scope.Scope
	loader host.Loader
	name   string
}

// modelProviderOf is the profile's plugin model provider when its
// model.provider names one, else nil.
func modelProviderOf(sc *scope.Scope, loader host.Loader) (*modelProvider, error) {
	snap, err := sc.Load()
	if err != nil {
		return nil, err
	}
	name, ok := strings.CutPrefix(snap.Config.Model.Provider, profile.PluginProviderPrefix)
	if !ok {
		return nil, nil
	}
	if name == "" {
		return nil, fmt.Errorf("model.provider %q of profile %q names no plugin model provider (want %s<name>)",
			snap.Config.Model.Provider, sc.Profile.Name, profile.PluginProviderPrefix)
	}
	return &modelProvider{sc: sc, loader: loader, name: name}, nil
}

// lookup finds the model provider: from the host's discovery (cached
// profile data, no host started) when the loader has it, else from the
// plugins loaded.
func (p *modelProvider) lookup(ctx context.Context) (plugin.ModelProvider, error) {
	if p.loader == nil {
		return nil, fmt.Errorf("model.provider %s%s of profile %q: the profile has no plugins: %w",
			profile.PluginProviderPrefix, p.name, p.sc.Profile.Name, host.ErrNotFound)
	}
	if d, ok := p.loader.(interface {
		ModelProviders(context.Context) ([]plugin.ModelProvider, error)
	}); ok {
		list, err := d.ModelProviders(ctx)
		if err != nil {
			return nil, err
		}
		var names []string
		for _, mp := range list {
			if mp.Profile().Name == p.name {
				return mp, nil
			}
			names = append(names, mp.Profile().Name)
		}
		return nil, fmt.Errorf("model.provider %s%s of profile %q: no model-provider plugin registers it (there are: %s): %w",
			profile.PluginProviderPrefix, p.name, p.sc.Profile.Name, strings.Join(names, ", "), host.ErrNotFound)
	}
	return p.loader.ModelProvider(ctx, p.name)
}

// Client implements agent.ModelProvider.
func (p *modelProvider) Client(ctx context.Context, env *agent.Env, base *llm.Client) (*llm.Client, error) {
	mp, err := p.lookup(ctx)
	if err != nil {
		return nil, err
	}
	c := *base
	prof := mp.Profile()
	if c.BaseURL == "" {
		c.BaseURL = prof.BaseURL
	}
	if c.APIKey == "" {
		snap, err := p.sc.Load()
		if err != nil {
			return nil, err
		}
		for _, v := range prof.EnvVars {
			if key, ok := snap.Env.Lookup(v); ok && key != "" {
				c.APIKey = key
				break
			}
		}
	}
	session := sessionOf(env)
	extra, err := mp.BuildExtraBody(plugin.WithSession(ctx, session), session)
	if err != nil {
		return nil, fmt.Errorf("model provider %s of profile %q: %w", p.name, p.sc.Profile.Name, err)
	}
	c.ExtraBody = extra
	return &c, nil
}

// ImageTool is the tool agentd offers when a profile's plugins registered
// image generation providers: it runs one, in the profile's own plugins,
// as the calling session.
const ImageTool = "image_generate"

// imageTool is the image_generate tool of a profile.
type imageTool struct {
	loader    host.Loader
	providers []string // sorted
}

type imagesKey struct{}

// imageProvidersOf lists the profile's image providers, once per scope.
func imageProvidersOf(ctx context.Context, sc *scope.Scope, loader host.Loader) []string {
	v, _ := sc.Value(imagesKey{}, func() (any, error) {
		ps, err := loader.Plugins(ctx)
		if err != nil {
			return nil, err // not remembered: the next turn asks again
		}
		var names []string
		for _, p := range ps {
			for _, pr := range p.Providers {
				if pr.Kind == host.KindImageGen {
					names = append(names, pr.Name)
				}
			}
		}
		sort.Strings(names)
		return names, nil
	})
	names, _ := v.([]string)
	return names
}

// Spec implements agent.Tool.
func (t *imageTool) Spec() llm.FunctionDef {
	params, _ := json.Marshal(map[string]any{
		"type": "object",
		"properties": map[string]any{
			"prompt":   map[string]any{"type": "string", "description": "what to draw"},
			"provider": map[string]any{"type": "string", "enum": t.providers, "description": "the image provider (default " + t.providers[0] + ")"},
			"options":  map[string]any{"type": "object", "description": "provider options (size, style, ...)"},
		},
		"required": []string{"prompt"},
	})
	return llm.FunctionDef{Name: ImageTool, Description: "Generate an image with one of this profile's image providers: " +
		strings.Join(t.providers, ", ") + ". Returns the provider's result as JSON.", Parameters: params}
}

// Call implements agent.Tool.
func (t *imageTool) Call(ctx context.Context, env *agent.Env, args json.RawMessage) (string, error) {
	var a struct {
		Prompt   string         `json:"prompt"`
		Provider string         `json:"provider"`
		Options  map[string]any `json:"options"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return "", fmt.Errorf("%s: bad arguments: %w", ImageTool, err)
	}
	if strings.TrimSpace(a.Prompt) == "" {
		return "", errors.New(ImageTool + `: argument "prompt" is empty`)
	}
	name := a.Provider
	if name == "" {
		name = t.providers[0]
	}
	if i := sort.SearchStrings(t.providers, name); i == len(t.providers) || t.providers[i] != name {
		return "", fmt.Errorf("%s: no image provider %q (there are: %s)", ImageTool, name, strings.Join(t.providers, ", "))
	}
	ctx = plugin.WithSession(ctx, sessionOf(env))
	p, err := t.loader.ImageGenProvider(ctx, name)
	if err != nil {
		return "", fmt.Errorf("%s: %w", ImageTool, err)
	}
	out, err := p.Generate(ctx, a.Prompt, a.Options)
	if err != nil {
		return "", fmt.Errorf("%s with %s: %w", ImageTool, name, err)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "", fmt.Errorf("%s with %s: the result is not plain data: %w", ImageTool, name, err)
	}
	return string(b), nil
}
