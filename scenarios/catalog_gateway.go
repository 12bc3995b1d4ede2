package scenarios

import (
	"net/http"
	"time"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/llmgw"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// The gateway family certifies a multi-tenant LLM gateway: a `kind:
// gateway` target (its provisioner mints each tenant's key) and agentd's
// own gateway (its access templates) alike. Each tenant's provider answers
// with text naming the tenant's model, so a reply shows whose provider
// answered it.

// gatewayResponder answers every request with text naming the tenant and
// its model.
func gatewayResponder(t *tenants.Tenant) fakellm.Responder {
	return func(fakellm.Record) fakellm.Response {
		return fakellm.Text("gateway reply from the provider of " + t.Name + " serving " + t.Model())
	}
}

// gatewayConcurrency is how many chats each tenant makes at once.
const gatewayConcurrency = 3

func gatewayTenants() Spec {
	return Spec{
		ID:        "gateway-tenants",
		Purpose:   "each tenant's gateway key reaches only its own provider with its own upstream key and model; foreign, upstream and missing keys and foreign models are refused and drive nothing; all at once; again after a restart on the same data",
		Backends:  []harness.Backend{harness.BackendGateway},
		Focus:     []Invariant{Requests, Text, Authz, Routing, SharedStore},
		Snapshots: perTenant(0),
		Timeout:   5 * time.Minute,
		Responder: gatewayResponder,
		Needs:     []Need{NeedLLMGateway},
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
				if !g.CanRestart() {
					e.skip("restart", "the harness did not start the gateway (gateway_url): it cannot restart it")
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
	}
}

// failoverModes are the ways a tenant's own upstream fails.
var failoverModes = []struct {
	name string
	resp func() fakellm.Response
}{
	{"5xx", func() fakellm.Response {
		return fakellm.Error(http.StatusInternalServerError, "upstream failure (failover probe)")
	}},
	{"429", func() fakellm.Response {
		return fakellm.Error(http.StatusTooManyRequests, "rate limited (failover probe)").WithRetryAfter(time.Second)
	}},
	{"hang", func() fakellm.Response { return fakellm.Hang().WithFor(time.Second) }},
}

// failoverAttempts is how many failures a tenant's provider serves in a
// row: enough to outlast a gateway's own retries on the tenant's channel
// (agentd's agent.api_max_retries is 2), so a gateway that fails over
// does so.
const failoverAttempts = 3

func gatewayFailover() Spec {
	phases := []Phase{{Name: "start", Run: func(e *Env) {
		e.StartLLMGatewayWith(llmgw.Options{Retries: true}) // the gateway's own retries and fallbacks on
		e.GatewayOwnKeys()
	}}}
	for _, m := range failoverModes {
		phases = append(phases, Phase{Name: "upstream-" + m.name, Run: func(e *Env) {
			e.GatewayFailover(e.Tenants, m.name, m.resp)
		}})
	}
	return Spec{
		ID:        "gateway-failover",
		Purpose:   "every tenant's own upstream answers 5xx, 429 with Retry-After, or hangs while all chat at once: the gateway never retries on another tenant's channel",
		Backends:  []harness.Backend{harness.BackendGateway},
		Focus:     []Invariant{Routing, Requests, Text},
		Snapshots: perTenant(0),
		Timeout:   6 * time.Minute,
		Responder: gatewayResponder,
		Needs:     []Need{NeedLLMGateway},
		Phases:    phases,
	}
}

func gatewayRoutes() Spec {
	return Spec{
		ID:        "gateway-routes",
		Purpose:   "every tenant-facing route the target declares answers its owner in each credential form and query variant with none of another tenant's data; called anonymously, or with one tenant's credentials and another's identifiers (guessed neighbours, captured ids and ids in credential templates included), it is refused with no data and no upstream effect",
		Backends:  []harness.Backend{harness.BackendGateway},
		Focus:     []Invariant{Authz, Text, Routing, SharedStore},
		Snapshots: perTenant(0),
		Timeout:   5 * time.Minute,
		Responder: gatewayResponder,
		Needs:     []Need{NeedLLMGateway},
		Phases: []Phase{
			{Name: "own-routes", Run: func(e *Env) {
				if len(e.targetGateway().Routes) == 0 {
					e.T.Skipf("the target declares no llm_gateway.routes")
				}
				e.StartLLMGateway()
				e.GatewayOwnKeys() // traffic, so logs and usage rows exist
				e.GatewayOwnRoutes()
			}},
			{Name: "anonymous-routes", Run: func(e *Env) { e.GatewayAnonymousRoutes() }},
			{Name: "cross-tenant-routes", Run: func(e *Env) { e.GatewayCrossRoutes() }},
			{Name: "owner-rows", Run: func(e *Env) { e.GatewayOwnerRows() }},
		},
	}
}
