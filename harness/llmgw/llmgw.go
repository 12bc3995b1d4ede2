// Package llmgw runs a multi-tenant LLM gateway for a scenario and reaches
// it as each tenant would. Start runs the target's gateway command in the
// sandbox (on a free loopback port when the command takes {port}), waits
// for its ready line or its ready path, and provisions the tenants: the
// target's provisioner gets the roster and prints each tenant's key,
// models, base path, management credentials and identifiers (see
// harness.Provisioned), or the target's access templates fill them (agentd).
// Every value a provisioner minted is adopted as its tenant's secret
// canary, so every later scan looks for it.
//
//	g, err := llmgw.Start(ctx, life, box)
//	a := g.Access(alpha)
//	r, err := g.Chat(ctx, harness.ChatRequest{Path: a.BasePath + g.ChatPath(), Key: a.Key, Model: a.Models[0], Text: "hi"})
//	err = g.Restart(ctx) // same data folder, no new provisioning
package llmgw

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants/scan"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// ErrProvision wraps every reason a provisioner's answer is refused.
var ErrProvision = errors.New("gateway provisioning failed")

// Gateway is one running gateway target and its tenants' access.
type Gateway struct {
	box  *harness.Sandbox
	spec harness.LLMGateway
	http *http.Client
	life context.Context // the gateway process's lifetime: when it ends, the process is killed

	mu     sync.Mutex
	proc   *harness.Proc // nil for a running (staging) gateway
	base   string
	more   []Node // the nodes after the first (StartNodes), in order
	starts int
	access map[string]harness.GatewayAccess
	off    offboarding // what deprovision and provision did beyond the first provisioning (offboard.go)
	opts   Options
}

// Start runs the sandbox's gateway (or adopts the staging one at
// gateway_url), waits until it is ready, and provisions every tenant.
// The gateway process lives until life ends or Stop; ctx bounds the
// start and the provisioning.
func Start(ctx, life context.Context, box *harness.Sandbox) (*Gateway, error) {
	return StartWith(ctx, life, box, Options{})
}

// StartWith is Start with options for the provisioner.
func StartWith(ctx, life context.Context, box *harness.Sandbox, opts Options) (*Gateway, error) {
	spec := harness.LLMGateway{}
	if box.Target.LLMGateway != nil {
		spec = *box.Target.LLMGateway
	}
	if spec.Access == nil && len(spec.Provision) == 0 {
		return nil, fmt.Errorf("gateway %s: the target gives neither llm_gateway.provision nor llm_gateway.access", box.Target.Name)
	}
	if opts.SharedModel != "" && len(spec.Provision) == 0 {
		return nil, fmt.Errorf("%w: the target has no provisioner (its tenants' models are fixed by its access templates)", ErrSharedModel)
	}
	g := &Gateway{box: box, spec: spec, http: &http.Client{}, life: life, opts: opts}
	if box.Target.GatewayURL != "" {
		g.base = strings.TrimRight(box.Target.GatewayURL, "/")
		wait, cancel := context.WithTimeout(ctx, box.Target.ReadyWithin(90*time.Second))
		err := box.Target.AwaitGateway(wait)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("gateway %s: %w", box.Target.Name, err)
		}
	} else if err := g.start(ctx); err != nil {
		return nil, err
	}
	if err := g.provision(ctx); err != nil {
		g.Stop()
		if opts.SharedModel != "" && errors.Is(err, ErrProvision) {
			return nil, fmt.Errorf("%w: %w", ErrSharedModel, err)
		}
		return nil, err
	}
	return g, nil
}

// Base is the gateway's base URL (http://host:port).
func (g *Gateway) Base() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.base
}

// Proc is the gateway's process, or nil for a staging gateway.
func (g *Gateway) Proc() *harness.Proc {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.proc
}

// CanRestart reports whether the harness can restart the gateway: it
// runs it, or it is a running one that the target's remote.stop and
// remote.start restart with the server.
func (g *Gateway) CanRestart() bool {
	return g.box.Target.GatewayURL == "" || g.box.Target.RemoteRestarts()
}

// RestartLacks says why the harness cannot restart the gateway ("" when
// it can), naming what would let it.
func (g *Gateway) RestartLacks() string {
	if g.CanRestart() {
		return ""
	}
	return "the harness did not start the gateway (gateway_url), and the target does not restart it: " + g.box.Target.RemoteLacks("restart")
}

// Spec is the target's llm_gateway block.
func (g *Gateway) Spec() harness.LLMGateway { return g.spec }

// ChatPath is the chat completions path under a base path.
func (g *Gateway) ChatPath() string { return g.spec.ChatCompletionsPath() }

// Access is tenant t's way into the gateway (zero when it has none).
func (g *Gateway) Access(t *tenants.Tenant) harness.GatewayAccess {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.access[t.Name]
}

// start runs the gateway command once (its first node) and waits until
// it is ready.
func (g *Gateway) start(ctx context.Context) error {
	n, err := g.startNode(ctx, 1)
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.proc, g.base = n.Proc, n.Base
	g.mu.Unlock()
	return nil
}

// startNode runs node n (1-based) of the gateway: its command and env
// values with n as {replica}, on a free port of its own, and waits until
// it is ready.
func (g *Gateway) startNode(ctx context.Context, n int) (Node, error) {
	tg := g.box.Target
	if len(tg.Gateway) == 0 {
		return Node{}, fmt.Errorf("gateway %s: the target gives no gateway command", tg.Name)
	}
	port := "0"
	if strings.Contains(strings.Join(tg.Gateway, " "), "{port}") {
		p, err := harness.FreePort()
		if err != nil {
			return Node{}, err
		}
		port = p
	}
	argv := harness.Expand(tg.Gateway, map[string]string{"host": "127.0.0.1", "port": port, "root": g.box.Root, "replica": strconv.Itoa(n)})
	g.mu.Lock()
	g.starts++
	name := fmt.Sprintf("gateway-%d", g.starts)
	if n > 1 {
		name = fmt.Sprintf("gateway-node%d-%d", n, g.starts)
	}
	g.mu.Unlock()
	env := map[string]string{"PORT": port}
	if n > 1 {
		env = g.box.ReplicaEnv(n)
		env["PORT"] = port
	}
	what := "gateway"
	if n > 1 {
		what = fmt.Sprintf("gateway node %d", n)
	}
	p, err := g.box.Start(g.life, name, argv, false, env)
	if err != nil {
		return Node{}, fmt.Errorf("start %s: %w", what, err)
	}
	wait, cancel := context.WithTimeout(ctx, tg.ReadyWithin(90*time.Second))
	defer cancel()
	base := "http://127.0.0.1:" + port
	if tg.ReadyLine != "" && (g.spec.ReadyPath == "" || port == "0") {
		m, err := p.WaitLine(wait, tg.ReadyRE())
		if err != nil {
			p.Kill()
			return Node{}, fmt.Errorf("%s not ready: %w", what, err)
		}
		if tg.ReadyRE().NumSubexp() > 0 {
			base = "http://" + tg.ReadyAddr(m, "127.0.0.1")
		}
	}
	if g.spec.ReadyPath != "" {
		if err := g.pollReady(wait, p, base); err != nil {
			p.Kill()
			if n > 1 {
				return Node{}, fmt.Errorf("%s: %w", what, err)
			}
			return Node{}, err
		}
	}
	return Node{N: n, Base: base, Proc: p}, nil
}

// pollReady polls the ready path until it answers 2xx, failing early when
// the gateway exits.
func (g *Gateway) pollReady(ctx context.Context, p *harness.Proc, base string) error {
	last := "no answer yet"
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+g.spec.ReadyPath, nil)
		if err != nil {
			return fmt.Errorf("gateway ready path %s: %w", g.spec.ReadyPath, err)
		}
		resp, err := g.http.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return nil
			}
			last = fmt.Sprintf("HTTP %d %s", resp.StatusCode, strings.TrimSpace(string(body)))
		} else if ctx.Err() == nil {
			last = err.Error()
		}
		select {
		case <-p.Done():
			return fmt.Errorf("gateway exited before GET %s answered 2xx (%v): %w\nlast output:\n%s", g.spec.ReadyPath, p.ExitErr(), harness.ErrExited, p.Tail())
		case <-ctx.Done():
			return fmt.Errorf("gateway: GET %s never answered 2xx: last %s: %w\nlast output:\n%s", g.spec.ReadyPath, last, harness.ErrNotReady, p.Tail())
		case <-tick.C:
		}
	}
}

// Stop stops the gateway's processes, every node (SIGTERM, then kill
// after a grace); a staging gateway is left alone.
func (g *Gateway) Stop() error {
	g.mu.Lock()
	ps := []*harness.Proc{g.proc}
	for _, n := range g.more {
		ps = append(ps, n.Proc)
	}
	g.proc, g.more = nil, nil
	g.mu.Unlock()
	var errs []error
	for i, p := range ps {
		if p == nil {
			continue
		}
		if err := p.Stop(20 * time.Second); err != nil && !signalExit(p) {
			what := "gateway"
			if i > 0 {
				what = fmt.Sprintf("gateway node %d", i+1)
			}
			errs = append(errs, fmt.Errorf("stop %s: %w", what, err))
		}
	}
	return errors.Join(errs...)
}

// signalExit reports whether p ended by the SIGTERM it was asked to stop
// with (a clean enough stop for a gateway without a signal handler).
func signalExit(p *harness.Proc) bool {
	var exit *exec.ExitError
	if !errors.As(p.ExitErr(), &exit) {
		return false
	}
	ws, ok := exit.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM
}

// Restart stops the gateway and starts it again on the same data folder
// (the sandbox root); the tenants keep the access they were provisioned
// with. ctx bounds the start; the process lives as long as Start's life.
func (g *Gateway) Restart(ctx context.Context) error {
	if !g.CanRestart() {
		return errors.New("restart gateway: " + g.RestartLacks())
	}
	if g.box.Target.GatewayURL != "" {
		// A running gateway restarts with its server (remote.stop, then
		// remote.start, which waits for both to be ready).
		if err := g.box.StopRemote(ctx); err != nil {
			return fmt.Errorf("restart gateway: %w", err)
		}
		if err := g.box.StartRemote(ctx); err != nil {
			return fmt.Errorf("restart gateway: %w", err)
		}
		return nil
	}
	g.mu.Lock()
	nodes := len(g.more)
	g.mu.Unlock()
	if err := g.Stop(); err != nil {
		return err
	}
	if err := g.start(ctx); err != nil {
		return err
	}
	if nodes > 0 {
		_, err := g.StartNodes(ctx)
		return err
	}
	return nil
}

// provision fills every tenant's access: from the provisioner's answer,
// or from the access templates.
func (g *Gateway) provision(ctx context.Context) error {
	ts := g.box.Set.Tenants
	access := map[string]harness.GatewayAccess{}
	if len(g.spec.Provision) > 0 {
		got, err := g.runProvisioner(ctx, g.roster())
		if err != nil {
			return err
		}
		g.noteOperatorSecrets(got.OperatorSecrets)
		for _, t := range ts {
			a, ok := got.Tenants[t.Name]
			if !ok {
				return fmt.Errorf("%w: the provisioner gave no access for tenant %s", ErrProvision, t.Name)
			}
			if a.Key == "" {
				return fmt.Errorf("%w: the provisioner gave tenant %s no key", ErrProvision, t.Name)
			}
			access[t.Name] = a
		}
	} else {
		for _, t := range ts {
			a := g.spec.Access.For(t)
			a.IDs = AgentIDs(t)
			access[t.Name] = a
		}
	}
	for _, t := range ts {
		a := access[t.Name]
		if len(a.Models) == 0 {
			a.Models = []string{g.modelOf(t)}
		}
		if a.BasePath == "" {
			a.BasePath = "/v1"
		}
		a.BasePath = "/" + strings.Trim(a.BasePath, "/")
		access[t.Name] = a
		if err := adopt(t, a); err != nil {
			return err
		}
	}
	g.mu.Lock()
	g.access = access
	g.mu.Unlock()
	return nil
}

// adopt records what the gateway minted for t as t's secret canaries: its
// key (and the key without an sk- prefix, as gateways store it) and every
// header value long enough to scan for (without a Bearer prefix).
func adopt(t *tenants.Tenant, a harness.GatewayAccess) error {
	vals := map[string]tenants.Kind{a.Key: tenants.GatewayKey}
	if bare, ok := strings.CutPrefix(a.Key, "sk-"); ok {
		vals[bare] = tenants.GatewayKey
	}
	for _, v := range a.Headers {
		vals[strings.TrimSpace(strings.TrimPrefix(v, "Bearer "))] = tenants.GatewayCredential
	}
	for _, hs := range a.Credentials {
		for _, v := range hs {
			vals[credentialValue(v)] = tenants.GatewayCredential
		}
	}
	for v, kind := range vals {
		if len(v) < scan.MinValueLen*2 {
			continue // too short to tell from chance (a user id header)
		}
		if _, err := t.Adopt(kind, v); err != nil {
			return err
		}
	}
	return nil
}

// runProvisioner runs the provisioner with the roster on stdin and reads
// its answer. Its output is not logged (it holds every tenant's keys);
// its last lines show in an error.
func (g *Gateway) runProvisioner(ctx context.Context, r tenants.Roster) (harness.Provisioned, error) {
	var out harness.Provisioned
	roster, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return out, fmt.Errorf("provision: encode roster: %w", err)
	}
	rosterPath := filepath.Join(g.box.Logs, "gateway-roster.json")
	if err := os.WriteFile(rosterPath, roster, 0o600); err != nil {
		return out, fmt.Errorf("provision: %w", err)
	}
	base := g.Base()
	port := base[strings.LastIndex(base, ":")+1:]
	argv := harness.Expand(g.spec.Provision, map[string]string{"root": g.box.Root, "port": port, "host": "127.0.0.1"})
	env := g.box.Env(g.provisionerEnv(map[string]string{"GATEWAY_URL": base, "ROOT": g.box.Root, "ROSTER": rosterPath}))
	// A provisioner may read $ROSTER and never its stdin: the roster is
	// written beside it, and a write it never reads (a broken pipe) is no
	// error (runTool).
	lines, err := g.runTool(ctx, "provisioner", argv, env, roster)
	if err != nil {
		return out, fmt.Errorf("%w: %w", ErrProvision, err)
	}
	dec := json.NewDecoder(strings.NewReader(strings.Join(lines, "\n")))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return out, fmt.Errorf("%w: its stdout is not {\"tenants\": {NAME: {key, models, base_path, headers, ids}}}: %w", ErrProvision, err)
	}
	return out, nil
}

// Chat asks the gateway for one chat completion.
func (g *Gateway) Chat(ctx context.Context, r harness.ChatRequest) (harness.GatewayReply, error) {
	c := harness.GatewayClient{Base: g.Base(), HTTP: g.http}
	return c.Complete(ctx, r)
}

// Reply is one answer of a route.
type Reply struct {
	Method, Path string
	Status       int
	Body         []byte
}

// Do makes one HTTP request on the gateway.
func (g *Gateway) Do(ctx context.Context, method, path string, headers map[string]string, body []byte) (Reply, error) {
	return g.doAt(ctx, g.Base(), method, path, headers, body)
}

// doAt is Do on another base URL (an agent server's serve backend).
func (g *Gateway) doAt(ctx context.Context, base, method, path string, headers map[string]string, body []byte) (Reply, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return Reply{}, fmt.Errorf("gateway %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := g.http.Do(req)
	if err != nil {
		return Reply{}, fmt.Errorf("gateway %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return Reply{}, fmt.Errorf("gateway %s %s: read body: %w", method, path, err)
	}
	return Reply{Method: method, Path: path, Status: resp.StatusCode, Body: data}, nil
}

// Credentials are the headers caller sends on route r.
func Credentials(r harness.Route, caller harness.GatewayAccess) map[string]string {
	if r.Auth == "key" || (r.Auth == "" && len(caller.Headers) == 0) {
		return map[string]string{"Authorization": "Bearer " + caller.Key}
	}
	return caller.Headers
}

// FillRoute fills route r's placeholders ({<name>_id}, and {own.<name>_id}:
// this is the owner's own call) from ids; ok is false when ids lack one.
func FillRoute(r harness.Route, ids map[string]string) (path, body string, ok bool) {
	v := harness.NewRouteValues(harness.GatewayAccess{}, ids, ids)
	path, miss := v.Fill(r.Path)
	body, miss2 := v.Fill(r.Body)
	if miss != "" || miss2 != "" {
		return "", "", false
	}
	return path, body, true
}

// CallRoute calls route r with caller's credentials and the identifiers
// ids (the caller's own, or another tenant's); ok is false when ids lack
// one of the route's.
func (g *Gateway) CallRoute(ctx context.Context, r harness.Route, caller harness.GatewayAccess, ids map[string]string) (Reply, bool, error) {
	return g.callRouteAt(ctx, g.Base(), r, caller, ids)
}

// callRouteAt is CallRoute on the gateway node at base.
func (g *Gateway) callRouteAt(ctx context.Context, base string, r harness.Route, caller harness.GatewayAccess, ids map[string]string) (Reply, bool, error) {
	path, body, ok := FillRoute(r, ids)
	if !ok {
		return Reply{}, false, nil
	}
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	h, why := OwnCredentials(r, caller, harness.NewRouteValues(caller, ids, ids))
	if why != "" {
		return Reply{}, false, nil
	}
	rep, err := g.doAt(ctx, base, r.Method, path, h, b)
	return rep, true, err
}

// OwnCredentials are the headers caller sends on route r of its own: the
// first of the route's credential forms (Route.CredentialForms) that can
// be filled with values, so a route whose only working form is a
// template or a named credential is called with it, not with a key the
// gateway refuses there. why says why none could be.
func OwnCredentials(r harness.Route, caller harness.GatewayAccess, values harness.RouteValues) (map[string]string, string) {
	var whys []string
	for _, f := range r.CredentialForms() {
		h, why := FormHeaders(r, f, caller, values)
		if why == "" {
			return h, ""
		}
		whys = append(whys, why)
	}
	return nil, strings.Join(whys, "; ")
}
