package host

import (
	"fmt"

	"github.com/tenantcanary/tenantcanary/agentd/homefs"
	"github.com/tenantcanary/tenantcanary/isolation"
)

// Open returns the Loader for a profile's resolved isolation mode: a
// Manager whose host starts on first use (host), or the plugins loaded into
// this process now (in_process). For in_process only Profile, PluginsDir,
// Enabled, Backend, Log and CallTimeout of cfg are used.
func Open(mode isolation.Mode, cfg Config) (Loader, error) {
	switch mode {
	case isolation.Host:
		return New(cfg)
	case isolation.InProcess:
		return LoadInProcess(InProcessConfig{
			Profile: cfg.Profile, Mode: mode, PluginsDir: cfg.PluginsDir, Enabled: cfg.Enabled,
			Home:    homefs.Home{Dir: cfg.Home, FollowLinks: cfg.FollowLinks, SpecialFiles: cfg.SpecialFiles},
			Backend: cfg.Backend, Log: cfg.Log, CallTimeout: cfg.CallTimeout,
		})
	}
	return nil, fmt.Errorf("open plugins of profile %s: unknown isolation mode %q (want %q or %q)", cfg.Profile, mode, isolation.InProcess, isolation.Host)
}
