package faults

// Faults of agentd's gateway as a multi-tenant LLM gateway (issue 16),
// each caught by the gateway family of scenarios.
const (
	// GatewayAnyModel: the gateway serves a request naming any model,
	// another profile's included, instead of refusing a model the
	// profile does not have.
	GatewayAnyModel Name = "gateway-any-model"
	// GatewayFailoverForeign: a turn that failed upstream (5xx, 429, a
	// hang) is retried in another profile, on that profile's provider.
	GatewayFailoverForeign Name = "gateway-failover-foreign"
)

// gatewayFaults lists the faults of this file.
func gatewayFaults() []Name { return []Name{GatewayAnyModel, GatewayFailoverForeign} }
