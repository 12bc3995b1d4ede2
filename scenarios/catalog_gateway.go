package scenarios

import (
	"fmt"
	"net/http"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// agentGateway is the gateway scenario's gateway, from own-keys on.
var agentGateway = &stateKey[*Gateway]{"gateway"}

func gateway() Spec {
	return Spec{
		ID:        "gateway",
		Purpose:   "each tenant's API key works on its own gateway route; every foreign key on every route is refused and drives nothing",
		Backends:  []harness.Backend{harness.BackendGateway},
		Needs:     []Need{NeedGatewayAccess},
		Focus:     []Invariant{Requests, Text},
		Snapshots: perTenant(1),
		Timeout:   3 * time.Minute,
		Phases: []Phase{
			{Name: "own-keys", Run: func(e *Env) {
				g := e.StartGateway()
				for i, t := range e.Tenants {
					e.ExpectSnapshots(t, 1)
					a := e.gatewayAccess(t)
					ctx, cancel := e.ctx(e.Times.Turn)
					r, err := g.Client.Complete(ctx, harness.ChatRequest{Path: e.gatewayChatPath(a), Key: a.Key, Model: a.Models[0],
						Text: "Run the environment probe for " + t.Name + ".", Stream: i%2 == 1})
					cancel()
					if err != nil {
						e.T.Fatalf("gateway chat of %s: %v", t.Name, err)
					}
					e.KeepText(t, "gateway reply to "+t.Name, r.Body)
					if r.Status != http.StatusOK {
						e.T.Errorf("%s's own key on its own route: HTTP %d: %s", t.Name, r.Status, r.Body)
					}
				}
				*stateOf(e, agentGateway) = g
			}},
			{Name: "foreign-keys", Run: func(e *Env) {
				g := *stateOf(e, agentGateway)
				for _, route := range e.Tenants {
					before := len(route.Requests())
					ra := e.gatewayAccess(route)
					path := e.gatewayChatPath(ra)
					for _, key := range e.Tenants {
						if key == route {
							continue
						}
						for _, k := range []string{e.gatewayAccess(key).Key, key.ProviderKey(), ""} {
							ctx, cancel := e.ctx(30 * time.Second)
							r, err := g.Client.Complete(ctx, harness.ChatRequest{Path: path, Key: k, Model: ra.Models[0], Text: "Run the environment probe."})
							cancel()
							if err != nil {
								e.T.Fatalf("gateway chat on %s's route: %v", route.Name, err)
							}
							e.KeepText(route, fmt.Sprintf("gateway reply on %s's route to a foreign key", route.Name), scrubSent(r.Body, harness.ChatRequest{Key: k}))
							if r.Status != http.StatusUnauthorized && r.Status != http.StatusForbidden {
								e.Find(invariants.Finding{Invariant: invariants.Authz, Tenant: route.Name, Owner: key.Name,
									Where:  invariants.Where{Label: "gateway route of " + route.Name, Path: path},
									Detail: fmt.Sprintf("answered HTTP %d to %s's key (want 401 or 403)", r.Status, key.Name), Excerpt: excerpt(r.Body)})
							}
						}
					}
					if after := len(route.Requests()); after != before {
						e.Find(invariants.Finding{Invariant: invariants.Authz, Tenant: route.Name,
							Where:  invariants.Where{Label: "gateway route of " + route.Name},
							Detail: fmt.Sprintf("foreign keys drove %d request(s) to its provider", after-before)})
					}
				}
			}},
		},
	}
}

// gatewayAccess is t's way into an agent server's gateway, from the
// target's llm_gateway.access (NeedGatewayAccess guarantees one).
func (e *Env) gatewayAccess(t *tenants.Tenant) harness.GatewayAccess {
	a := e.Box.Target.LLMGateway.Access.For(t)
	if len(a.Models) == 0 {
		a.Models = []string{t.Model()}
	}
	return a
}

// gatewayChatPath is the chat completions path of access a.
func (e *Env) gatewayChatPath(a harness.GatewayAccess) string {
	return a.BasePath + e.Box.Target.LLMGateway.ChatCompletionsPath()
}
