package host

import (
	"io/fs"
	"path/filepath"

	"github.com/tenantcanary/tenantcanary/agentd/homefs"
	"github.com/tenantcanary/tenantcanary/plugin/pluginload"
)

// tenantPlugins is where the server reads a profile's plugins folder:
// through its home (homefs: no link followed, nothing opened that blocks,
// nothing read past its limit) when the folder lies in the home, as
// agentd's always does; by path otherwise (a folder that is no tenant's).
type tenantPlugins struct {
	dir     string // the plugins folder on disk
	enabled []string
	fsys    fs.FS  // the home; nil: by path
	rel     string // the plugins folder's name in fsys
}

// pluginsOf is cfg's plugins folder as the server reads it.
func pluginsOf(home homefs.Home, dir string, enabled []string) tenantPlugins {
	t := tenantPlugins{dir: dir, enabled: enabled}
	if home.Dir == "" {
		return t
	}
	rel, err := filepath.Rel(home.Dir, dir)
	if err != nil || !filepath.IsLocal(rel) {
		return t
	}
	t.fsys, t.rel = home, filepath.ToSlash(rel)
	return t
}

// discover lists the plugins (see pluginload.DiscoverFS).
func (t tenantPlugins) discover() ([]pluginload.Found, error) {
	if t.fsys == nil {
		return pluginload.Discover(t.dir, t.enabled)
	}
	return pluginload.DiscoverFS(t.fsys, t.rel, t.dir, t.enabled)
}

// fingerprint is the fingerprint of the plugin folder f (see
// pluginload.FingerprintFS).
func (t tenantPlugins) fingerprint(f pluginload.Found) (string, error) {
	if t.fsys == nil {
		return pluginload.Fingerprint(f.Dir)
	}
	rel, err := filepath.Rel(t.dir, f.Dir)
	if err != nil || !filepath.IsLocal(rel) {
		return pluginload.Fingerprint(f.Dir)
	}
	return pluginload.FingerprintFS(t.fsys, t.rel+"/"+filepath.ToSlash(rel))
}

// home is the profile's home as the server opens it.
func (m *Manager) home() homefs.Home {
	return homefs.Home{Dir: m.cfg.Home, FollowLinks: m.cfg.FollowLinks, SpecialFiles: m.cfg.SpecialFiles}
}

// plugins is the profile's plugins folder as the server reads it.
func (m *Manager) plugins() tenantPlugins {
	return pluginsOf(m.home(), m.cfg.PluginsDir, m.cfg.Enabled)
}
