package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/tenantcanary/tenantcanary/plugin"
	"github.com/tenantcanary/tenantcanary/plugin/pluginload"
)

// ModelCacheDir is where extracted model-provider profiles are cached,
// under a profile's home.
const ModelCacheDir = "cache/plugin_host/model-providers"

type modelCache struct {
	Plugin      string                `json:"plugin"`
	Fingerprint string                `json:"fingerprint"`
	Profiles    []plugin.ModelProfile `json:"profiles"`
}

// ModelProviders discovers the profile's model-provider plugins and returns
// a proxy for each model they register, without starting the host: profile
// data comes from a cache keyed by a fingerprint of the plugin's files,
// filled by a one-shot child whose environment holds no credentials.
// BuildExtraBody runs in the host, started on first call.
func (m *Manager) ModelProviders(ctx context.Context) ([]plugin.ModelProvider, error) {
	found, err := m.plugins().discover()
	if err != nil {
		return nil, fmt.Errorf("discover model providers of profile %s: %w", m.cfg.Profile, err)
	}
	var out []plugin.ModelProvider
	for _, f := range found {
		if f.Kind != pluginload.KindModelProvider {
			continue
		}
		profiles, err := m.modelProfiles(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, p := range profiles {
			out = append(out, modelProxy{proxy: &proxy{m: m, kind: KindModel, name: p.Name}, profile: p})
		}
	}
	return out, nil
}

// ModelCachePath is the cache file of a model-provider plugin folder's
// current contents.
func ModelCachePath(home string, f pluginload.Found) (string, error) {
	fp, err := pluginload.Fingerprint(f.Dir)
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ModelCacheDir, f.Name+"-"+fp+".json"), nil
}

// modelProfiles reads the cache, or fills it. The cache lives in the
// profile's home, which the profile's own tools can write: it is read and
// written through the home (package homefs), following no symlink.
func (m *Manager) modelProfiles(ctx context.Context, f pluginload.Found) ([]plugin.ModelProfile, error) {
	fp, err := m.plugins().fingerprint(f)
	if err != nil {
		return nil, fmt.Errorf("fingerprint plugin %s of profile %s: %w", f.Name, m.cfg.Profile, err)
	}
	home := m.home()
	name := path.Join(ModelCacheDir, f.Name+"-"+fp+".json")
	var c modelCache
	b, err := home.ReadFile(name)
	if err == nil && json.Unmarshal(b, &c) == nil {
		return c.Profiles, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read model provider cache: %w", err)
	}
	profiles, err := m.extract(ctx, f)
	if err != nil {
		return nil, err
	}
	c = modelCache{Plugin: f.Name, Fingerprint: fp, Profiles: profiles}
	if err := home.WriteFileAtomic(name, mustJSON(c), 0o600); err != nil {
		return nil, fmt.Errorf("cache model provider %s: %w", f.Name, err)
	}
	return profiles, nil
}

// extract runs the plugin once in a credential-free child (HOME and PATH
// only) and returns the profiles it registers.
func (m *Manager) extract(ctx context.Context, f pluginload.Found) ([]plugin.ModelProfile, error) {
	env := m.cfg.ExtractEnv
	if env == nil {
		env = []string{"HOME=" + m.cfg.Home, "PATH=" + os.Getenv("PATH")}
	}
	one, err := New(Config{
		Profile: m.cfg.Profile + " (model-provider extraction)", Command: m.cfg.Command, Home: m.cfg.Home,
		Env:     env,
		Backend: noBackend{}, Log: m.cfg.Log, CallTimeout: m.cfg.StartTimeout, StartTimeout: m.cfg.StartTimeout,
		Limits: m.cfg.Limits, EnvOutside: m.cfg.EnvOutside,
	})
	if err != nil {
		return nil, err
	}
	defer one.Close()
	sctx, cancel := context.WithTimeout(ctx, one.cfg.StartTimeout)
	defer cancel()
	h, err := one.spawn(sctx)
	if err != nil {
		return nil, fmt.Errorf("extract model provider %s: %w", f.Name, err)
	}
	one.mu.Lock()
	one.cur = h
	one.mu.Unlock()
	raw, err := one.requestOn(sctx, h, "extract model provider "+f.Name, opExtract, "", extractBody{Plugin: f, Limits: m.cfg.Limits, Env: env, Started: h.started})
	if err != nil {
		return nil, err
	}
	var r extractReply
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("extract model provider %s: %v: %w", f.Name, err, ErrProtocol)
	}
	return r.Profiles, nil
}

type noBackend struct{}

func (noBackend) DispatchTool(ctx context.Context, session, tool string, args map[string]any) (string, error) {
	return "", fmt.Errorf("dispatch %s during model-provider extraction: %w", tool, ErrUnsupported)
}

func (noBackend) Facade(ctx context.Context, session, facade, method string, args []string) (string, error) {
	return "", fmt.Errorf("%s.%s during model-provider extraction: %w", facade, method, ErrUnsupported)
}
