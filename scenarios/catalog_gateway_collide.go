package scenarios

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/harness/llmgw"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// gateway-collide: every tenant is provisioned with one model name, each
// on its own channel (its own provider and upstream key), and the tenants
// chat one after another in both orders. A gateway whose upstream client
// or answer cache is keyed by the model name hands the first tenant's
// channel (its key, its answer) to the next. Then every tenant's upstream
// fails while all chat at once, with the gateway's own retries on: a
// retry that leaves the tenant's group finds another tenant's channel
// under the same name (with a model of its own, no other channel serves
// it, so gateway-failover alone cannot see such a retry).

func gatewayCollide() Spec {
	return withNeeds(llmGatewaySpec(Spec{
		ID:      "gateway-collide",
		Purpose: "every tenant provisioned with the same model name on its own channel, chatting one after another in both orders, then all at once while their upstreams fail with the gateway's retries on: each is served by its own provider, never through a client or cache keyed by the model, never by a retry on another tenant's channel",
		Focus:   []Invariant{Routing, Requests, Text},
		Timeout: 5 * time.Minute,
		Phases: []Phase{
			{Name: "same-model-name", Run: func(e *Env) {
				e.startSharedModel("collide-model-" + newToken())
				e.sharedModelChats(e.Tenants, "in order")
			}},
			{Name: "reverse-order", Run: func(e *Env) {
				rev := slices.Clone(e.Tenants)
				slices.Reverse(rev)
				e.sharedModelChats(rev, "in reverse order")
			}},
			{Name: "upstream-5xx", Run: func(e *Env) {
				e.GatewayFailover(e.Tenants, "5xx under the shared model name", failoverModes[0].resp)
			}},
		},
	}), NeedProvisioner)
}

// startSharedModel starts the gateway with every tenant provisioned under
// model; a gateway whose provisioner cannot do it skips the scenario with
// the reason.
func (e *Env) startSharedModel(model string) {
	e.T.Helper()
	e.startLLMGateway(llmgw.Options{SharedModel: model, Retries: true}, func(err error) {
		if errors.Is(err, llmgw.ErrSharedModel) {
			e.T.Skipf("two tenants cannot be provisioned with one model name: %v", err)
		}
	})
	for _, t := range e.Box.Set.Tenants {
		t.AlsoServes(model) // its provider may be asked for it, in a main request too
	}
}

// sharedModelChats: each tenant of ts in turn chats under the shared model
// name (no tools: an aux request, which a provider answers whatever model
// it names, with its tenant's reply canary): its own provider must answer
// (the reply carries the tenant's own reply canary), and no other
// provider may see the chat.
func (e *Env) sharedModelChats(ts []*tenants.Tenant, order string) {
	e.T.Helper()
	g := e.llmGateway()
	all := e.Box.Set.Tenants
	for _, t := range ts {
		req := e.ownChat(t, false)
		req.Tools = false
		before := invariants.Counts(all)
		r := e.chat(t, fmt.Sprintf("gateway reply to %s under the shared model name (%s)", t.Name, order), req, 90*time.Second)
		after := invariants.Counts(all)
		what := fmt.Sprintf("%s's chat under the model name every tenant was provisioned with (%s)", t.Name, order)
		for _, f := range invariants.RoutedElsewhere(all, t.Name, what, before, after) {
			e.Find(f)
		}
		for _, o := range all {
			if o != t && strings.Contains(r.Text, o.Value(tenants.Reply)) {
				e.Find(invariants.Finding{Invariant: invariants.Routing, Tenant: t.Name, Owner: o.Name, Kind: tenants.Reply,
					Where:  invariants.Where{Label: "gateway route of " + t.Name, Path: req.Path, Part: "model " + g.Access(t).Models[0]},
					Detail: fmt.Sprintf("%s was answered by %s's provider under the shared model name (%s)", t.Name, o.Name, order)})
			}
		}
		e.gatewayControl(t, "own provider answers under the shared model name", r.Status == http.StatusOK && after[t.Name] > before[t.Name] && strings.Contains(r.Text, t.Value(tenants.Reply)),
			fmt.Sprintf("%s: HTTP %d, %d new request(s) on its provider: %s", order, r.Status, after[t.Name]-before[t.Name], excerpt(r.Body)))
	}
}
