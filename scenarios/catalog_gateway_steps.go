package scenarios

import (
	"bytes"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/llmgw"
	"github.com/tenantcanary/tenantcanary/invariants"
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

// llmGatewaySpec is s as a scenario of the gateway family: it runs
// against the target's gateway, which it needs, takes no agent snapshots,
// and each tenant's provider answers with text naming the tenant
// (gatewayResponder).
func llmGatewaySpec(s Spec) Spec {
	s.Backends = []harness.Backend{harness.BackendGateway}
	s.Snapshots = perTenant(0)
	s.Responder = gatewayResponder
	s.Needs = []Need{NeedLLMGateway}
	return s
}

// withNeeds is s needing more of its target.
func withNeeds(s Spec, more ...Need) Spec {
	s.Needs = append(append([]Need(nil), s.Needs...), more...)
	return s
}

// The gateway family's steps: what its phases do with the gateway.

// gatewayRun is a scenario's gateway and the positive controls its phases
// made.
type gatewayRun struct {
	g        *llmgw.Gateway
	mu       sync.Mutex
	controls map[string]Control // by tenant and name: the last outcome
	routes   routeState         // the route probes' captured ids
}

// llmGatewayKey is the gateway family's gateway and controls: nil until
// StartLLMGateway, so the checks of a run without one find none.
var llmGatewayKey = &stateKey[*gatewayRun]{"llm-gateway"}

// gatewayRunOf is the run's gateway and controls, nil before
// StartLLMGateway.
func (e *Env) gatewayRunOf() *gatewayRun {
	e.mu.Lock()
	defer e.mu.Unlock()
	return *stateOf(e, llmGatewayKey)
}

// startedGatewayRun is the run's gateway and controls, failing the
// scenario if it started none.
func (e *Env) startedGatewayRun() *gatewayRun {
	e.T.Helper()
	r := e.gatewayRunOf()
	if r == nil {
		e.T.Fatalf("no gateway: StartLLMGateway first")
	}
	return r
}

func (r *gatewayRun) control(t *tenants.Tenant, name string, ok bool, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := t.Name + "\x00" + name
	if prev, seen := r.controls[key]; seen && !prev.Passed {
		return // a failed control stays failed
	}
	c := Control{Tenant: t.Name, Name: name, Passed: ok}
	if !ok {
		c.Detail = detail
	}
	r.controls[key] = c
}

// StartLLMGateway starts the gateway and provisions the tenants.
func (e *Env) StartLLMGateway() *llmgw.Gateway {
	e.T.Helper()
	return e.StartLLMGatewayWith(llmgw.Options{})
}

// StartLLMGatewayWith starts the gateway and provisions the tenants with
// opts; the operator secrets the provisioner printed become the
// operator's canaries.
func (e *Env) StartLLMGatewayWith(opts llmgw.Options) *llmgw.Gateway {
	e.T.Helper()
	return e.startLLMGateway(opts, func(error) {})
}

// startLLMGateway is StartLLMGatewayWith, with a look at a start's error
// before it fails the run (a scenario may skip on one it expects).
func (e *Env) startLLMGateway(opts llmgw.Options, onErr func(error)) *llmgw.Gateway {
	e.T.Helper()
	ctx, cancel := e.ctx(3 * time.Minute)
	defer cancel()
	g, err := llmgw.StartWith(ctx, e.Ctx, e.Box, opts)
	if err != nil {
		onErr(err)
		e.targetCannotStart(harness.BackendGateway, err)
		e.T.Fatalf("start the gateway: %v", err)
	}
	e.targetReady()
	e.T.Cleanup(func() { _ = g.Stop() })
	e.mu.Lock()
	*stateOf(e, llmGatewayKey) = &gatewayRun{g: g, controls: map[string]Control{}}
	e.mu.Unlock()
	e.noteProvisionerSecrets(g)
	return g
}

func (e *Env) llmGateway() *llmgw.Gateway {
	e.T.Helper()
	return e.startedGatewayRun().g
}

func (e *Env) gatewayControl(t *tenants.Tenant, name string, ok bool, detail string) {
	if r := e.gatewayRunOf(); r != nil {
		r.control(t, name, ok, detail)
	}
}

// chat is one chat of t's on the gateway, with t's access unless
// overridden; the reply is kept as a stream owned by t, without what the
// request itself sent (scrubSent).
func (e *Env) chat(t *tenants.Tenant, label string, r harness.ChatRequest, within time.Duration) harness.GatewayReply {
	e.T.Helper()
	ctx, cancel := e.ctx(within)
	defer cancel()
	rep, err := e.llmGateway().Chat(ctx, r)
	if err != nil && rep.Status == 0 {
		e.T.Fatalf("%s: %v", label, err)
	}
	e.KeepText(t, label, scrubSent(rep.Body, r))
	return rep
}

// scrubSent blanks out of a reply the key and model its request sent: a
// gateway quoting back what the caller itself presented ("no such model
// model-beta-...", "invalid key ...") tells the caller nothing it did not
// have.
func scrubSent(body []byte, r harness.ChatRequest) []byte {
	for _, v := range []string{r.Key, r.Model} {
		if len(v) >= 8 {
			body = bytes.ReplaceAll(body, []byte(v), []byte("[sent by the caller]"))
		}
	}
	return body
}

// ownChat is t's own chat: own key, own model, own route.
func (e *Env) ownChat(t *tenants.Tenant, stream bool) harness.ChatRequest {
	g := e.llmGateway()
	a := g.Access(t)
	return harness.ChatRequest{Path: a.BasePath + g.ChatPath(), Key: a.Key, Model: a.Models[0], Stream: stream, Tools: true,
		Text: "Say hello to " + t.Name + "."}
}

// GatewayOwnKeys: each tenant in turn, with its own key, model and route:
// answered, by its own provider only, and the reply shows its own model.
func (e *Env) GatewayOwnKeys() {
	e.T.Helper()
	ts := e.Box.Set.Tenants
	for i, t := range e.Tenants {
		before := invariants.Counts(ts)
		r := e.chat(t, "gateway reply to "+t.Name, e.ownChat(t, i%2 == 1), 90*time.Second)
		after := invariants.Counts(ts)
		for _, f := range invariants.RoutedElsewhere(ts, t.Name, t.Name+"'s own chat", before, after) {
			e.Find(f)
		}
		e.gatewayControl(t, "own key answered by own provider", r.Status == http.StatusOK && after[t.Name] > before[t.Name],
			fmt.Sprintf("HTTP %d, %d new request(s) on its provider: %s", r.Status, after[t.Name]-before[t.Name], excerpt(r.Body)))
		e.gatewayControl(t, "own model in own reply", strings.Contains(r.Text, t.Model()),
			fmt.Sprintf("the reply does not name its model: %s", excerpt(r.Body)))
	}
}

// GatewayForeignKeys: on every tenant's route, every key that is not the
// route's tenant's gateway key (another tenant's, where routes differ;
// every upstream key; none; a made-up one) is refused, and no provider
// sees a request.
func (e *Env) GatewayForeignKeys() {
	e.T.Helper()
	g := e.llmGateway()
	ts := e.Box.Set.Tenants
	before := invariants.Counts(ts)
	for _, route := range e.Tenants {
		ra := g.Access(route)
		type key struct{ owner, what, value string }
		var keys []key
		for _, k := range e.Tenants {
			ka := g.Access(k)
			if k != route && ka.BasePath != ra.BasePath {
				keys = append(keys, key{k.Name, "gateway key", ka.Key})
			}
			keys = append(keys, key{k.Name, "upstream provider key", k.ProviderKey()})
		}
		keys = append(keys, key{"", "no key", ""}, key{"", "a made-up key", "sk-" + newToken()})
		for _, k := range keys {
			req := e.ownChat(route, false)
			req.Key = k.value
			label := fmt.Sprintf("gateway reply on %s's route to %s", route.Name, k.what)
			if k.owner != "" {
				label += " of " + k.owner
			}
			r := e.chat(route, label, req, 30*time.Second)
			if r.Status/100 == 2 {
				e.Find(invariants.Finding{Invariant: invariants.Authz, Tenant: route.Name,
					Where:  invariants.Where{Label: "gateway route of " + route.Name, Path: req.Path},
					Detail: fmt.Sprintf("answered HTTP %d to %s (want a refusal)", r.Status, strings.TrimPrefix(label, "gateway reply on "+route.Name+"'s route to ")), Excerpt: excerpt(r.Body)})
			}
		}
	}
	after := invariants.Counts(ts)
	for _, t := range ts {
		if n := after[t.Name] - before[t.Name]; n > 0 {
			e.Find(invariants.Finding{Invariant: invariants.Authz, Tenant: t.Name, Where: invariants.Where{Label: "provider of " + t.Name},
				Detail: fmt.Sprintf("refused keys drove %d request(s) to its provider", n)})
		}
	}
}

// GatewayForeignModels: each tenant's own key naming another tenant's
// model is refused and reaches no provider.
func (e *Env) GatewayForeignModels() {
	e.T.Helper()
	g := e.llmGateway()
	ts := e.Box.Set.Tenants
	for _, a := range e.Tenants {
		for _, b := range e.Shuffled(e.Tenants) {
			if a == b {
				continue
			}
			req := e.ownChat(a, false)
			req.Model = g.Access(b).Models[0]
			before := invariants.Counts(ts)
			r := e.chat(a, fmt.Sprintf("gateway reply to %s naming %s's model", a.Name, b.Name), req, 60*time.Second)
			after := invariants.Counts(ts)
			what := fmt.Sprintf("%s's chat naming %s's model", a.Name, b.Name)
			for _, f := range invariants.RoutedElsewhere(ts, a.Name, what, before, after) {
				e.Find(f)
			}
			if r.Status/100 == 2 || after[a.Name] > before[a.Name] {
				e.Find(invariants.Finding{Invariant: invariants.Authz, Tenant: a.Name, Owner: b.Name, Kind: tenants.Model,
					Where:   invariants.Where{Label: "gateway route of " + a.Name, Path: req.Path, Part: "model"},
					Detail:  fmt.Sprintf("own key naming another tenant's model answered HTTP %d and drove %d request(s) upstream (want a refusal, nothing upstream)", r.Status, after[a.Name]-before[a.Name]),
					Excerpt: excerpt(r.Body)})
			}
		}
	}
}

// GatewayConcurrent: every tenant makes n chats at once; each is
// answered, and each tenant's provider served at least its n.
func (e *Env) GatewayConcurrent(n int) {
	e.T.Helper()
	ts := e.Box.Set.Tenants
	before := invariants.Counts(ts)
	g := e.llmGateway()
	var wg sync.WaitGroup
	errs := make(chan string, len(e.Tenants)*n)
	for _, t := range e.Tenants {
		for k := 0; k < n; k++ {
			req := e.ownChat(t, k%2 == 0)
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := e.ctx(2 * time.Minute)
				defer cancel()
				r, err := g.Chat(ctx, req)
				e.KeepText(t, fmt.Sprintf("concurrent gateway reply %d to %s", k, t.Name), r.Body)
				switch {
				case err != nil:
					errs <- fmt.Sprintf("concurrent chat of %s: %v", t.Name, err)
				case r.Status != http.StatusOK:
					errs <- fmt.Sprintf("concurrent chat of %s: HTTP %d: %s", t.Name, r.Status, excerpt(r.Body))
				case !strings.Contains(r.Text, t.Model()):
					errs <- fmt.Sprintf("concurrent chat of %s: the reply does not name its model: %s", t.Name, excerpt(r.Body))
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		e.T.Errorf("%s", msg)
	}
	after := invariants.Counts(ts)
	for _, t := range e.Tenants {
		e.gatewayControl(t, "all concurrent chats served by own provider", after[t.Name]-before[t.Name] >= n,
			fmt.Sprintf("its provider served %d of its %d concurrent chats", after[t.Name]-before[t.Name], n))
	}
}

// GatewayReads: each tenant's read APIs (the model list, the read
// routes) with its own credentials and identifiers: answered, and kept
// as streams to that tenant for the text scan.
func (e *Env) GatewayReads() {
	e.T.Helper()
	g := e.llmGateway()
	spec := g.Spec()
	for _, t := range e.Tenants {
		a := g.Access(t)
		ctx, cancel := e.ctx(30 * time.Second)
		if spec.ModelsPath != "" {
			path := a.BasePath + spec.ModelsPath
			r, err := g.Do(ctx, http.MethodGet, path, map[string]string{"Authorization": "Bearer " + a.Key}, nil)
			if err != nil {
				cancel()
				e.T.Fatalf("model list of %s: %v", t.Name, err)
			}
			e.KeepText(t, "model list of "+t.Name, r.Body)
			e.gatewayControl(t, "own model in own model list", r.Status == http.StatusOK && strings.Contains(string(r.Body), a.Models[0]),
				fmt.Sprintf("GET %s: HTTP %d: %s", path, r.Status, excerpt(r.Body)))
		}
		for _, route := range spec.Routes {
			if !route.Read || route.OnServe() {
				continue // another backend's routes: gateway-routes calls them
			}
			r, ok, err := g.CallRoute(ctx, route, a, a.IDs)
			if err != nil {
				cancel()
				e.T.Fatalf("route %q of %s: %v", route.Name, t.Name, err)
			}
			if !ok {
				continue
			}
			e.KeepText(t, fmt.Sprintf("route %q (%s %s) to %s", route.Name, r.Method, r.Path, t.Name), r.Body)
			e.gatewayControl(t, fmt.Sprintf("own route %q answers", route.Name), route.Succeeded(r.Status, r.Body),
				fmt.Sprintf("%s %s: HTTP %d: %s", r.Method, r.Path, r.Status, excerpt(r.Body)))
		}
		cancel()
	}
}

// FailoverChat is the kind of the canary each failover chat's text
// carries: it shows whose chat a provider's request is.
const FailoverChat tenants.Kind = "failover_chat"

// GatewayFailover has every tenant of ts chat at once while its own
// upstream fails: failoverAttempts failures of mode are scripted on each
// tenant's provider, and each chat's text carries a canary minted for it.
// Whatever each gets back, every request a provider recorded meanwhile must
// be its own tenant's chat: one carrying another tenant's chat is that
// chat routed to it, one carrying no chat of its own tenant is traffic no
// chat of its own explains; both are Routing findings. Each tenant's own
// provider must have been tried (a positive control).
func (e *Env) GatewayFailover(ts []*tenants.Tenant, mode string, resp func() fakellm.Response) {
	e.T.Helper()
	for _, t := range ts {
		if t.Provider == nil {
			e.skip(string(Routing)+" failover", "the tenants' providers run in another process: their answers cannot be scripted")
			return
		}
	}
	all := e.Box.Set.Tenants
	chatOf := map[string]*tenants.Tenant{} // chat canary -> its tenant
	mark := map[string]string{}            // tenant -> its chat canary
	for _, t := range ts {
		c := e.mint(t, FailoverChat)
		chatOf[c.Value], mark[t.Name] = t, c.Value
		for i := 0; i < failoverAttempts; i++ {
			t.Provider.Enqueue(resp())
		}
	}
	var mu sync.Mutex
	status := map[string]int{} // tenant -> the gateway's answer to its chat
	before := invariants.Counts(all)
	e.atOnce(ts, func(t *tenants.Tenant) {
		req := e.ownChat(t, false)
		req.Text += " (chat " + mark[t.Name] + ")"
		r := e.chat(t, fmt.Sprintf("gateway reply to %s while its upstream fails (%s)", t.Name, mode), req, 60*time.Second)
		t.Provider.DropScript()
		mu.Lock()
		status[t.Name] = r.Status
		mu.Unlock()
	})
	after := invariants.Counts(all)
	for _, x := range all {
		if !x.HasProvider() {
			continue
		}
		where := invariants.Where{Label: "provider of " + x.Name}
		own := 0
		for _, r := range x.Requests()[before[x.Name]:after[x.Name]] {
			var others []*tenants.Tenant
			mine := false
			for m, t := range chatOf {
				if bytes.Contains(r.RawBody, []byte(m)) {
					if t == x {
						mine = true
					} else {
						others = append(others, t)
					}
				}
			}
			sort.Slice(others, func(i, j int) bool { return others[i].Name < others[j].Name })
			for _, o := range others {
				e.Find(invariants.Finding{Invariant: invariants.Routing, Tenant: x.Name, Owner: o.Name, Kind: FailoverChat, Where: where,
					Detail: fmt.Sprintf("%s's chat while its own upstream failed (%s; the gateway answered HTTP %d) reached this provider (request #%d)",
						o.Name, mode, status[o.Name], r.Seq)})
			}
			switch {
			case len(others) > 0:
			case mine:
				own++
			default:
				e.Find(invariants.Finding{Invariant: invariants.Routing, Tenant: x.Name, Where: where,
					Detail: fmt.Sprintf("request #%d, carrying no chat of %s's, reached this provider while the tenants' own upstreams failed (%s)",
						r.Seq, x.Name, mode)})
			}
		}
		if _, chatted := mark[x.Name]; chatted {
			e.gatewayControl(x, "own upstream tried during failover ("+mode+")", own > 0,
				fmt.Sprintf("its provider saw no request carrying its chat (HTTP %d)", status[x.Name]))
		}
	}
}
