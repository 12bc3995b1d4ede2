package scenarios

import "time"

// gatewayConcurrency is how many chats each tenant makes at once.
const gatewayConcurrency = 3

func gatewayTenants() Spec {
	return llmGatewaySpec(Spec{
		ID:      "gateway-tenants",
		Purpose: "each tenant's gateway key reaches only its own provider with its own upstream key and model; foreign, upstream and missing keys and foreign models are refused and drive nothing; all at once; again after a restart on the same data",
		Focus:   []Invariant{Requests, Text, Authz, Routing, SharedStore},
		Timeout: 5 * time.Minute,
		Phases: []Phase{
			{Name: "own-keys", Run: func(e *Env) {
				e.StartLLMGateway()
				e.GatewayOwnKeys()
			}},
			{Name: "foreign-keys", Run: func(e *Env) { e.GatewayForeignKeys() }},
			{Name: "foreign-models", Run: func(e *Env) { e.GatewayForeignModels() }},
			{Name: "concurrent", Run: func(e *Env) { e.GatewayConcurrent(gatewayConcurrency) }},
			{Name: "read-apis", Run: func(e *Env) { e.GatewayReads() }},
			{Name: "restart", Run: func(e *Env) {
				g := e.llmGateway()
				if why := g.RestartLacks(); why != "" {
					e.skip("restart", why)
					return
				}
				ctx, cancel := e.ctx(2 * time.Minute)
				defer cancel()
				if err := g.Restart(ctx); err != nil {
					e.T.Fatalf("restart the gateway on the same data folder: %v", err)
				}
				e.GatewayOwnKeys()
				e.GatewayForeignKeys()
				e.GatewayForeignModels()
			}},
		},
	})
}
