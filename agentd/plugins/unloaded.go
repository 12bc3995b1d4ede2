package plugins

import (
	"context"
	"fmt"
	"strings"

	"github.com/tenantcanary/tenantcanary/agentd/agent"
	"github.com/tenantcanary/tenantcanary/agentd/scope"
	"github.com/tenantcanary/tenantcanary/host"
)

// A plugin that did not load (it does not compile, a value it registers
// does not satisfy the SDK's interface, the profile's isolation refuses
// it) is the tenant's to fix, so the tenant hears of it, not only the
// profile's log: an "error" event to the session's connection when a
// session starts, and, when the model calls a tool the profile does not
// have (the plugin's, perhaps), the tool result and an "error" event say
// which plugins did not load and why.

// unloadedKey keys, per scope, the profile's plugins that did not load.
type unloadedKey struct{}

// unloaded is the profile's plugins that did not load.
type unloaded struct {
	profile string
	bad     []host.PluginStatus
}

// unloadedOf reads, once per scope, which of the profile's plugins did not
// load. A failure to list them is not remembered: the next turn asks again.
func unloadedOf(ctx context.Context, sc *scope.Scope, loader host.Loader) *unloaded {
	v, err := sc.Value(unloadedKey{}, func() (any, error) {
		list, err := loader.Plugins(ctx)
		if err != nil {
			return nil, err
		}
		u := &unloaded{profile: sc.Profile.Name}
		for _, p := range list {
			if p.Error != "" {
				u.bad = append(u.bad, p)
			}
		}
		return u, nil
	})
	if err != nil {
		return nil
	}
	u, _ := v.(*unloaded)
	return u
}

// messages says, one line a plugin, which plugins did not load and why.
func (u *unloaded) messages() []string {
	if u == nil {
		return nil
	}
	out := make([]string, 0, len(u.bad))
	for _, p := range u.bad {
		out = append(out, fmt.Sprintf("plugin %s of profile %s did not load: %s", p.Name, u.profile, p.Error))
	}
	return out
}

// report sends one "error" event a plugin that did not load to env's
// session, if it has a connection to tell.
func (u *unloaded) report(env *agent.Env) {
	if env == nil || env.Emit == nil {
		return
	}
	for _, m := range u.messages() {
		env.Emit("error", map[string]any{"message": m})
	}
}

// missing answers a call of a tool the profile does not have
// (agent.MissingFunc): unknown, and which plugins did not load.
func (u *unloaded) missing(_ context.Context, env *agent.Env, name string) string {
	u.report(env)
	return fmt.Sprintf("error: unknown tool %q; %s", name, strings.Join(u.messages(), "; "))
}
