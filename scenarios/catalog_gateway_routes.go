package scenarios

import "time"

func gatewayRoutes() Spec {
	return withNeeds(llmGatewaySpec(Spec{
		ID:      "gateway-routes",
		Purpose: "every tenant-facing route the target declares answers its owner in each credential form and query variant with none of another tenant's data; called anonymously, or with one tenant's credentials and another's identifiers (guessed neighbours, captured ids and ids in credential templates included), it is refused with no data and no upstream effect; the routes a route chains (then), called by the caller with its own credentials after its own call and after each probe, answer with none of another tenant's data",
		Focus:   []Invariant{Authz, Text, Routing, SharedStore},
		Timeout: 5 * time.Minute,
		Phases: []Phase{
			{Name: "own-routes", Run: func(e *Env) {
				e.StartLLMGateway()
				e.GatewayOwnKeys() // traffic, so logs and usage rows exist
				e.GatewayOwnRoutes()
			}},
			{Name: "anonymous-routes", Run: func(e *Env) { e.GatewayAnonymousRoutes() }},
			{Name: "cross-tenant-routes", Run: func(e *Env) { e.GatewayCrossRoutes() }},
			{Name: "owner-rows", Run: func(e *Env) { e.GatewayOwnerRows() }},
		},
	}), NeedRoutes)
}
