package scenarios

import (
	"net/http"
	"time"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/harness/llmgw"
)

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
	return llmGatewaySpec(Spec{
		ID:      "gateway-failover",
		Purpose: "every tenant's own upstream answers 5xx, 429 with Retry-After, or hangs while all chat at once: the gateway never retries on another tenant's channel",
		Focus:   []Invariant{Routing, Requests, Text},
		Timeout: 6 * time.Minute,
		Phases:  phases,
	})
}
