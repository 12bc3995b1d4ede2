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
	"github.com/tenantcanary/tenantcanary/plugin/pluginload"
)

// modelProvider serves a profile's model calls from a plugin's model
// provider when its model.provider says plugin:<name> (read at each call,
// as every setting is): the plugin's profile gives the base URL and key
// variables model.base_url and model.key_env leave unset, and its
// BuildExtraBody, run in the profile's own plugins as the session, adds
// fields to the session's requests. Any other model.provider leaves the
// profile's client as it is.
type modelProvider struct {
	sc     *scope.Scope
	loader host.Loader // nil: the profile has no plugins
}

// lookup finds the model provider: from the host's discovery (cached
// profile data, no host started) when the loader has it, else from the
// plugins loaded.
func (p *modelProvider) lookup(ctx context.Context, name string) (plugin.ModelProvider, error) {
	what := fmt.Sprintf("model.provider %s%s of profile %q", profile.PluginProviderPrefix, name, p.sc.Profile.Name)
	if p.loader == nil {
		return nil, fmt.Errorf("%s: the profile has no plugins: %w", what, host.ErrNotFound)
	}
	if d, ok := p.loader.(interface {
		ModelProviders(context.Context) ([]plugin.ModelProvider, error)
	}); ok {
		list, err := d.ModelProviders(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		var names []string
		for _, mp := range list {
			if mp.Profile().Name == name {
				return mp, nil
			}
			names = append(names, mp.Profile().Name)
		}
		return nil, fmt.Errorf("%s: no plugin under plugins/%s/ registers it (they register: %s): %w",
			what, pluginload.ModelProvidersDir, strings.Join(names, ", "), host.ErrNotFound)
	}
	mp, err := p.loader.ModelProvider(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return mp, nil
}

// Client implements agent.ModelProvider.
func (p *modelProvider) Client(ctx context.Context, env *agent.Env, base *llm.Client) (*llm.Client, error) {
	snap, err := p.sc.Load()
	if err != nil {
		return nil, err
	}
	name, ok := strings.CutPrefix(snap.Config.Model.Provider, profile.PluginProviderPrefix)
	if !ok {
		return base, nil
	}
	if name == "" {
		return nil, fmt.Errorf("model.provider %q of profile %q names no plugin model provider (want %s<name>)",
			snap.Config.Model.Provider, p.sc.Profile.Name, profile.PluginProviderPrefix)
	}
	mp, err := p.lookup(ctx, name)
	if err != nil {
		return nil, err
	}
	c := *base
	prof := mp.Profile()
	if c.BaseURL == "" {
		c.BaseURL = prof.BaseURL
	}
	if c.APIKey == "" {
		for _, v := range prof.EnvVars {
			if key, ok := snap.Env.Lookup(v); ok && key != "" {
				c.APIKey = key
				break
			}
		}
	}
	session := sessionOf(env)
	extra, err := mp.BuildExtraBody(plugin.WithSession(ctx, session), session)
	if errors.Is(err, host.ErrUnavailable) {
		// The host died since the last call: the next call starts a new
		// one, and building a request's extra body twice is harmless, so
		// the model call need not fail with the host it never used.
		extra, err = mp.BuildExtraBody(plugin.WithSession(ctx, session), session)
	}
	if err != nil {
		return nil, fmt.Errorf("model provider %s of profile %q: %w", name, p.sc.Profile.Name, err)
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

// providerNames lists, sorted, the names of the profile's providers of
// one kind.
func providerNames(ctx context.Context, loader host.Loader, kind string) ([]string, error) {
	ps, err := loader.Plugins(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, p := range ps {
		for _, pr := range p.Providers {
			if pr.Kind == kind {
				names = append(names, pr.Name)
			}
		}
	}
	sort.Strings(names)
	return names, nil
}

// imageProvidersOf lists the profile's image providers, once per scope.
func imageProvidersOf(ctx context.Context, sc *scope.Scope, loader host.Loader) []string {
	v, _ := sc.Value(imagesKey{}, func() (any, error) {
		return providerNames(ctx, loader, host.KindImageGen) // an error is not remembered: the next turn asks again
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
