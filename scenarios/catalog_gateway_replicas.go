package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/llmgw"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// gateway-replicas: the gateway runs as several nodes over one set of
// stores (replicas: N on a target whose replicated command is its
// gateway), the way gateways run behind a load balancer, and each
// tenant's calls go to its nodes in an order the seed gives. Whatever a
// node keeps for itself must not serve another tenant, or a tenant the
// operator revoked through another node: a tenant's own chat and reads
// through every node are its own; the same prompt of every tenant at
// once, through different nodes, gets each its own answer; a tenant
// disabled through the first node (the one its provisioner talks to) is
// refused by every node right after. The leaks are the existing
// invariants' (text, routing, authz, revoked credential).

// gatewayNodesKey is gateway-replicas' state in a run.
var gatewayNodesKey = &stateKey[gatewayNodesState]{"gateway-replicas"}

// gatewayNodesState is the gateway's nodes and each tenant's order of
// them.
type gatewayNodesState struct {
	nodes []llmgw.Node
	order map[string][]llmgw.Node // by tenant: its node A (order[0]) and B (order[1])
}

// identicalGatewayPrompt is the prompt every tenant sends at once in
// identical-across: byte for byte the same messages.
const identicalGatewayPrompt = "Identical request over gateway nodes: say hello."

func gatewayReplicas() Spec {
	s := llmGatewaySpec(Spec{
		ID:      "gateway-replicas",
		Purpose: "the gateway's nodes over one set of stores, each tenant's calls spread over them: its own chat and reads through every node are its own, the same prompt of every tenant at once through different nodes gets each its own answer, and a tenant disabled through one node is refused by every other right after",
		Focus:   []Invariant{Text, Routing, invariants.Authz, invariants.RevokedCredential, PositiveControl},
		Timeout: 6 * time.Minute,
		Phases: []Phase{
			{Name: "nodes", Run: func(e *Env) { e.gatewayNodesStart() }},
			{Name: "own-across", Run: func(e *Env) { e.gatewayOwnAcross() }},
			{Name: "identical-across", Run: func(e *Env) { e.gatewayIdenticalAcross() }},
			// Last: it disables a tenant.
			{Name: "revoke-across", Run: func(e *Env) { e.gatewayRevokeAcross() }},
		},
	})
	s.Needs = append(s.Needs, NeedGatewayNodes)
	return s
}

// gatewayNodes is the run's node state.
func (e *Env) gatewayNodes() *gatewayNodesState { return stateOf(e, gatewayNodesKey) }

// gatewayNodesStart starts the gateway (its first node provisions the
// tenants), then its other nodes, and draws each tenant's order of them.
func (e *Env) gatewayNodesStart() {
	e.T.Helper()
	g := e.StartLLMGateway()
	e.GatewayOwnKeys() // through the first node: the family's own-key control
	ctx, cancel := e.ctx(e.Times.Ready)
	nodes, err := g.StartNodes(ctx)
	cancel()
	if err != nil {
		e.targetCannotStart(harness.BackendGateway, err)
		e.T.Fatalf("start the gateway's nodes: %v", err)
	}
	if len(nodes) < 2 {
		e.T.Fatalf("the target started %d gateway node(s), want 2 or more", len(nodes))
	}
	st := e.gatewayNodes()
	st.nodes = nodes
	st.order = map[string][]llmgw.Node{}
	for _, t := range e.Tenants {
		for _, i := range e.Rand.Perm(len(nodes)) {
			st.order[t.Name] = append(st.order[t.Name], nodes[i])
		}
		e.Logf("%s: gateway node A is %s, B is %s", t.Name, st.order[t.Name][0].Name(), st.order[t.Name][1].Name())
	}
}

// nodeChat is one chat of t's on node n, kept as a stream owned by t,
// checked to be answered by t's own provider alone (its control named
// control, when not "").
func (e *Env) nodeChat(t *tenants.Tenant, n llmgw.Node, r harness.ChatRequest, label, control string) harness.GatewayReply {
	e.T.Helper()
	g := e.llmGateway()
	ts := e.Box.Set.Tenants
	before := invariants.Counts(ts)
	ctx, cancel := e.ctx(e.Times.Call)
	rep, err := g.ChatAt(ctx, n, r)
	cancel()
	if err != nil && rep.Status == 0 {
		e.T.Fatalf("%s: %v", label, err)
	}
	e.KeepText(t, label, scrubSent(rep.Body, r))
	after := invariants.Counts(ts)
	for _, f := range invariants.RoutedElsewhere(ts, t.Name, label, before, after) {
		e.Find(f)
	}
	if control != "" {
		e.gatewayControl(t, control, rep.Status == http.StatusOK && after[t.Name] > before[t.Name] && strings.Contains(rep.Text, t.Model()),
			fmt.Sprintf("%s: HTTP %d, %d new request(s) on its provider: %s", label, rep.Status, after[t.Name]-before[t.Name], excerpt(rep.Body)))
	}
	return rep
}

// gatewayOwnAcross: each tenant, through each of its nodes in its order,
// chats with its own key (answered by its own provider, naming its own
// model: the control), lists its models and reads each of its read
// routes; every answer is kept as the tenant's text.
func (e *Env) gatewayOwnAcross() {
	e.T.Helper()
	g := e.llmGateway()
	spec := g.Spec()
	st := e.gatewayNodes()
	for _, t := range e.Tenants {
		a := g.Access(t)
		for _, n := range st.order[t.Name] {
			r := e.ownChat(t, false)
			r.Text = fmt.Sprintf("Say hello to %s on gateway %s.", t.Name, n.Name())
			e.nodeChat(t, n, r, fmt.Sprintf("gateway reply to %s on %s", t.Name, n.Name()), "own key answered by own provider on every node")
			ctx, cancel := e.ctx(e.Times.Call)
			if spec.ModelsPath != "" {
				path := a.BasePath + spec.ModelsPath
				rep, err := g.DoAt(ctx, n, http.MethodGet, path, map[string]string{"Authorization": "Bearer " + a.Key}, nil)
				if err != nil {
					cancel()
					e.T.Fatalf("model list of %s on %s: %v", t.Name, n.Name(), err)
				}
				e.KeepText(t, fmt.Sprintf("model list of %s on %s", t.Name, n.Name()), rep.Body)
				e.gatewayControl(t, "own model in own model list on every node", rep.Status == http.StatusOK && strings.Contains(string(rep.Body), a.Models[0]),
					fmt.Sprintf("GET %s on %s: HTTP %d: %s", path, n.Name(), rep.Status, excerpt(rep.Body)))
			}
			for _, route := range spec.Routes {
				if !route.Read || route.OnServe() {
					continue
				}
				rep, ok, err := g.CallRouteAt(ctx, n, route, a, a.IDs)
				if err != nil {
					cancel()
					e.T.Fatalf("route %q of %s on %s: %v", route.Name, t.Name, n.Name(), err)
				}
				if ok {
					e.KeepText(t, fmt.Sprintf("route %q (%s %s) to %s on %s", route.Name, rep.Method, rep.Path, t.Name, n.Name()), rep.Body)
				}
			}
			cancel()
		}
	}
}

// gatewayIdenticalAcross: every tenant sends the same messages at once,
// each with its own key and model, half of them through their node A and
// half through their node B, then the other way round. A response cache
// keyed without the tenant answers some of them with another's answer:
// another's model in the reply (a text finding), and no request of the
// prompt on its own provider (the control). The requests are concurrent,
// so which provider a request reached is told by its content (the prompt
// on the tenant's own provider), not by counts.
func (e *Env) gatewayIdenticalAcross() {
	e.T.Helper()
	st := e.gatewayNodes()
	index := map[*tenants.Tenant]int{}
	for i, t := range e.Tenants {
		index[t] = i
	}
	for round := range 2 {
		marks := map[string]int{}
		for _, t := range e.Tenants {
			marks[t.Name] = len(t.Requests())
		}
		node := func(t *tenants.Tenant) llmgw.Node { return st.order[t.Name][(index[t]+round)%2] }
		got, errs := gatherAtOnce(e, e.Times.Call, func(ctx context.Context, t *tenants.Tenant) (harness.GatewayReply, error) {
			r := e.ownChat(t, false)
			r.Text = identicalGatewayPrompt
			return e.llmGateway().ChatAt(ctx, node(t), r)
		})
		for _, t := range e.Tenants {
			label := fmt.Sprintf("identical request of %s on %s (round %d)", t.Name, node(t).Name(), round+1)
			rep := got[t.Name]
			if err := errs[t.Name]; err != nil && rep.Status == 0 {
				e.T.Fatalf("%s: %v", label, err)
			}
			r := e.ownChat(t, false)
			r.Text = identicalGatewayPrompt
			e.KeepText(t, label, scrubSent(rep.Body, r))
			reached := requestsCarry(t, marks[t.Name], identicalGatewayPrompt)
			e.gatewayControl(t, "own answer to the identical request on every node", rep.Status == http.StatusOK && reached && strings.Contains(rep.Text, t.Model()),
				fmt.Sprintf("%s: HTTP %d, its own provider saw the prompt: %v: %s", label, rep.Status, reached, excerpt(rep.Body)))
		}
	}
}

// gatewayRevokeAcross: one tenant, drawn by the seed, is disabled through
// the target's deprovision command (which talks to the first node); right
// after, its key is tried on the relay and the model list of every node,
// and must be refused everywhere, driving nothing upstream. Every other
// tenant is still served on every node (the control that the refusals
// mean something).
func (e *Env) gatewayRevokeAcross() {
	e.T.Helper()
	g := e.llmGateway()
	if !g.CanDeprovision() {
		e.skipRow(string(invariants.RevokedCredential), "a tenant disabled through one gateway node, used on another: the target declares no llm_gateway.deprovision, so the harness cannot disable a tenant")
		return
	}
	st := e.gatewayNodes()
	spec := g.Spec()
	v := e.Shuffled(e.Tenants)[0]
	a := g.Access(v)
	ts := e.Box.Set.Tenants
	ctx, cancel := e.ctx(2 * time.Minute)
	err := g.Deprovision(ctx, v, harness.StepDisable)
	cancel()
	if err != nil {
		e.T.Fatalf("disable %s: %v", v.Name, err)
	}
	how := "disabled through " + st.nodes[0].Name()
	before := invariants.Counts(ts)
	chat := fmt.Sprintf(`{"model": %q, "messages": [{"role": "user", "content": "revoked key of %s"}]}`, a.Models[0], v.Name)
	for _, n := range st.nodes {
		calls := []llmgw.Filled{{Method: http.MethodPost, Path: a.BasePath + g.ChatPath(), Body: chat, Headers: map[string]string{"Authorization": "Bearer " + a.Key}}}
		if spec.ModelsPath != "" {
			calls = append(calls, llmgw.Filled{Method: http.MethodGet, Path: a.BasePath + spec.ModelsPath, Headers: map[string]string{"Authorization": "Bearer " + a.Key}})
		}
		for _, c := range calls {
			ctx, cancel := e.ctx(e.Times.Call)
			rep, err := g.SendAt(ctx, n.Base, c)
			cancel()
			if err != nil {
				e.T.Fatalf("%s's revoked key on %s (%s %s): %v", v.Name, n.Name(), c.Method, c.Path, err)
			}
			label := fmt.Sprintf("%s's key on %s (%s %s) after it was %s", v.Name, n.Name(), c.Method, c.Path, how)
			e.KeepText(v, label, rep.Body)
			if rep.Status/100 == 2 {
				e.Find(invariants.Finding{Invariant: invariants.RevokedCredential, Tenant: v.Name,
					Where:  invariants.Where{Label: "gateway " + n.Name(), Method: c.Method, Path: c.Path},
					Place:  how + ": " + n.Name(),
					Detail: fmt.Sprintf("%s's gateway key was accepted on %s right after the tenant was %s: HTTP %d", v.Name, n.Name(), how, rep.Status), Excerpt: excerpt(rep.Body)})
			}
		}
	}
	after := invariants.Counts(ts)
	if n := after[v.Name] - before[v.Name]; n > 0 {
		e.Find(invariants.Finding{Invariant: invariants.RevokedCredential, Tenant: v.Name, Where: invariants.Where{Label: "provider of " + v.Name},
			Place:  how,
			Detail: fmt.Sprintf("%s's key, after the tenant was %s, drove %d request(s) to its provider through the gateway's nodes", v.Name, how, n)})
	}
	for _, t := range e.Tenants {
		if t == v {
			continue
		}
		for _, n := range st.order[t.Name] {
			r := e.ownChat(t, false)
			r.Text = fmt.Sprintf("Say hello to %s on %s after %s was disabled.", t.Name, n.Name(), v.Name)
			e.nodeChat(t, n, r, fmt.Sprintf("gateway reply to %s on %s after %s was %s", t.Name, n.Name(), v.Name, how), "own key still served on every node after a neighbour was disabled")
		}
	}
}
