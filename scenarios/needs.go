package scenarios

import (
	"fmt"

	"github.com/tenantcanary/tenantcanary/harness"
)

// Need is something a scenario needs of its target beyond its backends.
// Every need is a row of needs, which says when a target lacks it.
type Need string

// The needs a spec may declare.
const (
	NeedRestart Need = "restart" // the harness starts the serve backend, so it can restart it
	NeedFiles   Need = "files"   // the harness reads and writes the target's homes
	// NeedPlugins: the target loads a probe plugin: its own
	// (probe_plugin), else agentd's; a dialect declaring plugins.install
	// unsupported skips it.
	NeedPlugins Need = "plugins"
	// NeedPluginHostile: the probe plugin runs hostile steps.
	NeedPluginHostile Need = "plugin_hostile"
	// NeedAgentdPlugins: the target loads agentd's plugin format itself
	// (hooks, memory, image and model providers through agentd's SDK):
	// a target with a probe plugin of its own skips it.
	NeedAgentdPlugins Need = "agentd_plugins"
	// NeedLLMGateway: the target says how its gateway's tenants are
	// reached (llm_gateway: a provisioner or access templates). A `kind:
	// gateway` target runs only the scenarios with this need.
	NeedLLMGateway Need = "llm_gateway"
	// NeedGatewayAccess: an agent server's gateway backend, with the
	// target's llm_gateway.access saying how a tenant reaches it (its key,
	// route and model).
	NeedGatewayAccess Need = "gateway_access"
	// NeedTenantCredentials: each tenant's connection holds a credential
	// of its own (tenant_credentials), which the harness can revoke.
	NeedTenantCredentials Need = "tenant_credentials"
	// NeedReplicas: the harness starts the serve backend as two replicas
	// or more on one set of homes and stores (replicas: N, N >= 2).
	NeedReplicas Need = "replicas"
	// NeedGatewayNodes: the harness starts the gateway as two nodes or
	// more over one set of stores (replicas: N, N >= 2, on a target whose
	// replicated command is its gateway: Target.ReplicatesGateway).
	NeedGatewayNodes Need = "gateway_nodes"
	// NeedServerHere: the scenario watches the server's process on this
	// machine (its reads through inotify and fanotify, its /proc sampled
	// while it runs): the harness started the server on its own machine.
	NeedServerHere Need = "server_here"
	// NeedProvisioner: the gateway's tenants are minted by the target's
	// provisioner (llm_gateway.provision), which the harness can ask for
	// what access templates fix (one model name for every tenant).
	NeedProvisioner Need = "provisioner"
	// NeedDeprovision: the target says how a tenant is offboarded
	// (llm_gateway.deprovision).
	NeedDeprovision Need = "deprovision"
	// NeedRoutes: the target declares its gateway's tenant-facing routes
	// (llm_gateway.routes).
	NeedRoutes Need = "routes"
	// NeedURLFields: the target marks route fields that hold a URL the
	// gateway fetches (llm_gateway.routes[].url_fields).
	NeedURLFields Need = "url_fields"
	// NeedServerHost: the scenario reaches into the server's host beyond
	// its homes: it kills processes there by pid (plugin hosts, the server
	// itself as a crash would), reads its /proc: this machine for a server
	// the harness started; remote.exec, remote.processes and the files
	// and workdirs for a running one (Target.HostLacks).
	NeedServerHost Need = "server_host"
	// NeedHomesInPlace: the scenario hands a tenant paths in its own home
	// and puts the home back in place between its rows (links removed,
	// files renamed back), and watches the folders outside every home
	// (system folders, the workdirs' root) by listing them: the harness
	// started the server, so those are this machine's. On a running
	// server they are not yet done through remote.exec.
	NeedHomesInPlace Need = "homes_in_place"
	// NeedStores: the target declares shared stores (stores:) and the
	// harness starts its server, so it hands the server the stores'
	// addresses (through its delaying proxies when the scenario asks).
	NeedStores Need = "stores"
)

// needRow is one need and the reason a target lacks it ("" when it has
// it).
type needRow struct {
	need  Need
	unmet func(harness.Target) string
}

// needs is every Need a spec may declare; a new need is a new row.
var needs = []needRow{
	{NeedRestart, func(t harness.Target) string {
		if !t.CanRestart() && !t.RemoteRestarts() {
			if why := t.RemoteLacks("restart"); why != "" {
				return "needs to restart the server, and the harness did not start it: " + why
			}
			return "needs to restart the server, and the harness did not start it"
		}
		return ""
	}},
	{NeedFiles, func(t harness.Target) string {
		if !t.HomesReachable() {
			if why := t.RemoteLacks("files"); why != "" {
				return "needs the target's files, which the harness cannot reach: " + why
			}
			return "needs the target's files, which the harness cannot reach"
		}
		return ""
	}},
	{NeedPlugins, func(t harness.Target) string {
		if why := t.Dialect.Unsupported("plugins.install"); why != "" {
			return "needs the catalog's probe plugin: " + why
		}
		return ""
	}},
	{NeedPluginHostile, func(t harness.Target) string {
		if why := probePluginOf(t).Lacks(harness.AbilityHostile); why != "" {
			return "needs the probe plugin's hostile steps: " + why
		}
		return ""
	}},
	{NeedAgentdPlugins, func(t harness.Target) string {
		if why := t.AgentdPluginsUnsupported(); why != "" {
			return "needs agentd's plugin format (hooks, memory, image and model providers through agentd's plugin SDK): " + why
		}
		return ""
	}},
	{NeedLLMGateway, func(t harness.Target) string {
		if g := t.LLMGateway; g == nil || (g.Access == nil && len(g.Provision) == 0) {
			return "needs llm_gateway (a provisioner or access templates): how the gateway's tenants are reached"
		}
		return ""
	}},
	{NeedTenantCredentials, func(t harness.Target) string {
		if !t.TenantCredentials {
			return "needs tenant_credentials: every connection holds the operator's token, which no tenant can lose"
		}
		if t.Layout.Files.Env == "" || t.Layout.APIServerKeyEnv == "" {
			return "needs the layout's .env and credential variable (layout.home_files.env, layout.api_server_key_env): where the harness revokes a credential"
		}
		return ""
	}},
	{NeedReplicas, func(t harness.Target) string {
		if t.URL != "" && len(t.ReplicaURLs) == 0 {
			return "needs replicas: a running server's other replicas (replica_urls), or serve replicas the harness starts (serve with replicas: N)"
		}
		if t.ReplicaCount() < 2 {
			return fmt.Sprintf("needs replicas: 2 or more (the target runs %d serve process): a tenant's connections spread over several serve processes on one set of homes and stores", t.ReplicaCount())
		}
		if t.URL != "" {
			return ""
		}
		if len(t.Serve) == 0 {
			return "needs serve replicas (replicas: N with a serve command): the target's replicas are its gateway's nodes (gateway-replicas spreads a tenant over those)"
		}
		return ""
	}},
	{NeedGatewayNodes, func(t harness.Target) string {
		switch {
		case t.GatewayURL != "":
			return "needs gateway nodes the harness starts (replicas: N with a gateway command), and the target is a running gateway (gateway_url): its nodes are behind its url"
		case len(t.Gateway) == 0:
			return "needs a gateway command the harness starts as several nodes (replicas: N)"
		case len(t.Serve) > 0:
			return "needs gateway nodes (replicas: N on a target with no serve command): this target's replicas, if any, are its serve processes, and its gateway runs once"
		case t.ReplicaCount() < 2:
			return fmt.Sprintf("needs replicas: 2 or more of the gateway (the target runs %d gateway process): a tenant's calls spread over several gateway nodes over one set of stores", t.ReplicaCount())
		}
		return ""
	}},
	{NeedServerHere, func(t harness.Target) string {
		if t.URL != "" {
			return "needs the server on the harness's own machine (it watches the server's reads with inotify and fanotify and samples its /proc while it runs, which no remote: command gives), and the target is a running server reached through its url"
		}
		return ""
	}},
	{NeedServerHost, func(t harness.Target) string {
		if why := t.HostLacks(); why != "" {
			return "needs to reach the server's host beyond its homes (kill its plugin hosts and the server by pid, read its /proc): " + why
		}
		return ""
	}},
	{NeedHomesInPlace, func(t harness.Target) string {
		if t.URL != "" {
			return "needs the tenants' homes and the folders outside them in place (the chains hand an attacker its home's paths, put the home back between rows with removals and renames that a push does not carry, and list the system folders and the workdirs' root for writes), and the target is a running server: those are not yet done through remote.exec"
		}
		return ""
	}},
	{NeedStores, func(t harness.Target) string {
		if len(t.Stores) == 0 {
			return "needs shared stores (stores:): the target declares none, so no request of it waits on a store command to cancel"
		}
		if t.Remote() {
			return "needs to start the server itself: a running server reaches its stores on its own, not through the harness's delaying proxies"
		}
		return ""
	}},
	{NeedGatewayAccess, func(t harness.Target) string {
		if g := t.LLMGateway; g == nil || g.Access == nil {
			return "needs llm_gateway.access: how a tenant reaches the gateway (its key, route and model)"
		}
		return ""
	}},
	{NeedProvisioner, func(t harness.Target) string {
		if g := t.LLMGateway; g == nil || len(g.Provision) == 0 {
			return "needs llm_gateway.provision: only a provisioner can give two tenants one model name (access templates fix each tenant's model)"
		}
		return ""
	}},
	{NeedDeprovision, func(t harness.Target) string {
		if g := t.LLMGateway; g == nil || len(g.Deprovision) == 0 {
			return "needs llm_gateway.deprovision: the harness cannot disable or delete a tenant, so offboarding is not checked"
		}
		return ""
	}},
	{NeedRoutes, func(t harness.Target) string {
		if g := t.LLMGateway; g == nil || len(g.Routes) == 0 {
			return "needs llm_gateway.routes: the target declares no tenant-facing route of its gateway to probe"
		}
		return ""
	}},
	{NeedURLFields, func(t harness.Target) string {
		if g := t.LLMGateway; g != nil {
			for _, r := range g.Routes {
				if len(r.URLFields) > 0 {
					return ""
				}
			}
		}
		return "needs llm_gateway.routes[].url_fields: the target marks no route field as a URL the gateway fetches"
	}},
}

func lookupNeed(n Need) (needRow, bool) {
	for _, r := range needs {
		if r.need == n {
			return r, true
		}
	}
	return needRow{}, false
}

// Unmet says why target lacks n, or "" when it has it. An unknown need is
// never met.
func (n Need) Unmet(target harness.Target) string {
	r, ok := lookupNeed(n)
	if !ok {
		return fmt.Sprintf("needs %q, which no row of the catalog's needs defines", string(n))
	}
	return r.unmet(target)
}
