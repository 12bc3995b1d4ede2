package llmgw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Options tune what the provisioner is asked for.
type Options struct {
	// Retries asks the provisioner to turn on the gateway's own retries
	// and fallbacks: its environment gets RETRIES=1 (gateway-failover
	// sets it, so the failover probes exercise what a deployment runs).
	Retries bool
	// SharedModel, when set, is the model name every tenant is
	// provisioned with (the roster's model), each on its own channel:
	// gateway-collide's colliding names. Only a provisioner can do it.
	SharedModel string
}

// roster is the roster the provisioner reads: the set's, with every
// model named SharedModel when set.
func (g *Gateway) roster() tenants.Roster {
	r := g.box.Set.Roster("")
	if g.opts.SharedModel != "" {
		for i := range r.Tenants {
			r.Tenants[i].Model = g.opts.SharedModel
		}
	}
	return r
}

// modelOf is the model t was provisioned with: its own, or SharedModel.
func (g *Gateway) modelOf(t *tenants.Tenant) string {
	if g.opts.SharedModel != "" {
		return g.opts.SharedModel
	}
	return t.Model()
}

// ErrSharedModel wraps why tenants could not be provisioned with one
// model name (Options.SharedModel): the target has no provisioner, or the
// gateway refused it.
var ErrSharedModel = errors.New("the gateway's tenants cannot share a model name")

// ErrNoDeprovision is returned by Deprovision when the target declares no
// llm_gateway.deprovision.
var ErrNoDeprovision = errors.New("the target declares no llm_gateway.deprovision")

// offboarding is what happened to tenants after the first provisioning.
type offboarding struct {
	step     map[string]string // tenant -> the last deprovision step done
	as       map[string]string // successor tenant -> the gateway name it was provisioned under
	operator map[string]string // the provisioner's operator_secrets, by name
}

func (g *Gateway) provisionerEnv(extra map[string]string) map[string]string {
	if g.opts.Retries {
		extra["RETRIES"] = "1"
	}
	return extra
}

func (g *Gateway) noteOperatorSecrets(m map[string]string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.off.operator == nil {
		g.off.operator = map[string]string{}
	}
	for k, v := range m {
		if v != "" {
			g.off.operator[k] = v
		}
	}
}

// OperatorSecrets are the operator secrets the provisioner printed
// (operator_secrets), by name.
func (g *Gateway) OperatorSecrets() map[string]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]string, len(g.off.operator))
	for k, v := range g.off.operator {
		out[k] = v
	}
	return out
}

// CanDeprovision reports whether the target declares how to offboard a
// tenant (llm_gateway.deprovision).
func (g *Gateway) CanDeprovision() bool { return len(g.spec.Deprovision) > 0 }

// Deprovision runs the target's deprovision command for tenant t and step
// (harness.StepDisable, harness.StepDelete), with a
// harness.DeprovisionRequest on its stdin. t's access stays known: the
// offboarding probes present it again.
func (g *Gateway) Deprovision(ctx context.Context, t *tenants.Tenant, step string) error {
	if !g.CanDeprovision() {
		return ErrNoDeprovision
	}
	if step != harness.StepDisable && step != harness.StepDelete {
		return fmt.Errorf("deprovision %s: step %q: want %s or %s", t.Name, step, harness.StepDisable, harness.StepDelete)
	}
	req := harness.DeprovisionRequest{Step: step, Tenant: g.gatewayName(t), Access: g.Access(t)}
	in, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("deprovision %s: %w", t.Name, err)
	}
	base := g.Base()
	argv := harness.Expand(g.spec.Deprovision, map[string]string{"root": g.box.Root, "port": base[strings.LastIndex(base, ":")+1:], "host": "127.0.0.1"})
	env := g.box.Env(map[string]string{"GATEWAY_URL": base, "ROOT": g.box.Root, "STEP": step, "TENANT": req.Tenant})
	if _, err := g.runTool(ctx, "deprovision-"+step+"-"+t.Name, argv, env, in); err != nil {
		return fmt.Errorf("deprovision %s (%s): %w", t.Name, step, err)
	}
	g.mu.Lock()
	if g.off.step == nil {
		g.off.step = map[string]string{}
	}
	g.off.step[t.Name] = step
	g.mu.Unlock()
	return nil
}

// Offboarded is the last deprovision step done for t ("" for none).
func (g *Gateway) Offboarded(t *tenants.Tenant) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.off.step[t.Name]
}

// gatewayName is the name t has on the gateway: its own, or the name of
// the tenant it succeeds (ProvisionAs).
func (g *Gateway) gatewayName(t *tenants.Tenant) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if n := g.off.as[t.Name]; n != "" {
		return n
	}
	return t.Name
}

// ProvisionAs runs the provisioner once more, for successor alone,
// under the gateway name name (a tenant that was offboarded): the
// roster it reads names successor's provider, upstream key and model, and
// name. What it prints is successor's access, adopted as its canaries.
func (g *Gateway) ProvisionAs(ctx context.Context, successor *tenants.Tenant, name string) error {
	if len(g.spec.Provision) == 0 {
		return errors.New("provision again: the target has no provisioner")
	}
	r := g.roster()
	var keep []tenants.RosterTenant
	for _, rt := range r.Tenants {
		if rt.Name == successor.Name {
			rt.Name, rt.Launch = name, false
			keep = append(keep, rt)
		}
	}
	if len(keep) == 0 {
		return fmt.Errorf("provision %s as %s: not a tenant of the set", successor.Name, name)
	}
	r.Tenants, r.Launch = keep, ""
	got, err := g.runProvisioner(ctx, r)
	if err != nil {
		return fmt.Errorf("provision %s as %s: %w", successor.Name, name, err)
	}
	g.noteOperatorSecrets(got.OperatorSecrets)
	a, ok := got.Tenants[name]
	if !ok || a.Key == "" {
		return fmt.Errorf("%w: provision %s as %s: no access (with a key) for %s", ErrProvision, successor.Name, name, name)
	}
	if len(a.Models) == 0 {
		a.Models = []string{g.modelOf(successor)}
	}
	if a.BasePath == "" {
		a.BasePath = "/v1"
	}
	a.BasePath = "/" + strings.Trim(a.BasePath, "/")
	if err := adopt(successor, a); err != nil {
		return err
	}
	g.mu.Lock()
	g.access[successor.Name] = a
	if g.off.as == nil {
		g.off.as = map[string]string{}
	}
	g.off.as[successor.Name] = name
	g.mu.Unlock()
	return nil
}

// AddIDs adds identifiers t owns (read from the store after traffic) to
// its access, for the route placeholders; the provisioner's ids win.
func (g *Gateway) AddIDs(t *tenants.Tenant, ids map[string]string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	a, ok := g.access[t.Name]
	if !ok {
		return
	}
	merged := make(map[string]string, len(a.IDs)+len(ids))
	for k, v := range ids {
		merged[k] = v
	}
	for k, v := range a.IDs {
		merged[k] = v
	}
	a.IDs = merged
	g.access[t.Name] = a
}

// runTool runs a target's helper command (the provisioner, a deprovisioner) to its end
// with stdin; its output is not logged (it may hold keys): its last lines
// show in an error.
func (g *Gateway) runTool(ctx context.Context, name string, argv, env []string, stdin []byte) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	p, err := harness.StartProc(ctx, harness.ProcSpec{Name: name, Argv: argv, Dir: g.box.Cwd, Env: env, Stdin: true})
	if err != nil {
		return nil, err
	}
	defer p.Kill()
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		_, _ = p.Stdin().Write(stdin)
		p.Stdin().Close()
	}()
	defer func() { <-wrote }()
	select {
	case <-p.Done():
	case <-ctx.Done():
		p.Kill()
		return nil, fmt.Errorf("%s did not finish: %w\n%s", filepath.Base(argv[0]), ctx.Err(), p.Tail())
	}
	if err := p.ExitErr(); err != nil {
		return nil, fmt.Errorf("%s failed: %w\n%s", filepath.Base(argv[0]), err, p.Tail())
	}
	return p.Lines(), nil
}

// Credential is one form in which a tenant presents itself to the
// gateway, as headers.
type Credential struct {
	Name    string // "gateway key", "management headers"
	Headers map[string]string
}

// CredentialsOf are every credential form a tenant's access holds: its
// gateway key (Authorization: Bearer), its management headers together,
// each header value alone as a bearer token (a session token presented
// on the relay), and each credential the provisioner printed
// (credentials.NAME, a session cookie say), with each of its values alone
// as a bearer token too. Forms that send the same headers are given once.
// A route's own forms (its auth templates) are RouteProbes'.
func CredentialsOf(a harness.GatewayAccess) []Credential {
	var out []Credential
	seen := map[string]bool{}
	add := func(c Credential) {
		k := headersKey(c.Headers)
		if seen[k] {
			return
		}
		seen[k] = true
		out = append(out, c)
	}
	if a.Key != "" {
		add(Credential{Name: "gateway key", Headers: map[string]string{"Authorization": "Bearer " + a.Key}})
	}
	if len(a.Headers) > 0 {
		add(Credential{Name: "management headers", Headers: a.Headers})
	}
	names := make([]string, 0, len(a.Headers))
	for k := range a.Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		v := strings.TrimSpace(strings.TrimPrefix(a.Headers[k], "Bearer "))
		if len(v) >= 16 && "Bearer "+v != "Bearer "+a.Key && !(k == "Authorization" && len(a.Headers) == 1) {
			add(Credential{Name: "header " + k + " as a bearer token", Headers: map[string]string{"Authorization": "Bearer " + v}})
		}
	}
	creds := make([]string, 0, len(a.Credentials))
	for n := range a.Credentials {
		creds = append(creds, n)
	}
	sort.Strings(creds)
	for _, n := range creds {
		hs := a.Credentials[n]
		if len(hs) == 0 {
			continue
		}
		add(Credential{Name: "credential " + n, Headers: hs})
		for _, k := range slices.Sorted(maps.Keys(hs)) {
			if v := credentialValue(hs[k]); len(v) >= 16 {
				add(Credential{Name: "credential " + n + " (" + k + ") as a bearer token", Headers: map[string]string{"Authorization": "Bearer " + v}})
			}
		}
	}
	return out
}

// headersKey tells header sets apart: the same key is the same headers.
func headersKey(h map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(h)) {
		b.WriteString(k + ":" + h[k] + "\x00")
	}
	return b.String()
}
