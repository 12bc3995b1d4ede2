package llmgw

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// DryPass is harness.DryPass for a gateway target: sandbox, start, ready,
// provisioning, one chat per tenant answered by its own provider with its
// own model, another tenant's model refused, the declared store read once
// (each tenant's secret in its own rows), each declared route once as its
// owner, stop. Each step is written
// to w ("ok" or "FAIL" with a diagnosis); the first failure is returned,
// wrapping harness.ErrDryPass. wait bounds each step (0: 90s).
func DryPass(ctx context.Context, target harness.Target, root string, w io.Writer, wait time.Duration) (err error) {
	if wait <= 0 {
		wait = 90 * time.Second
	}
	rep := &harness.DryReport{W: w}
	step, fail := rep.Step, rep.Fail
	if err := target.Validate(); err != nil {
		return fail("target file", "%v", err)
	}
	step("target file", "%s %s is valid (kind %s)", target.Name, target.Version, target.Kind)
	reply := func(t *tenants.Tenant) fakellm.Responder {
		return func(fakellm.Record) fakellm.Response { return fakellm.Text("dry pass reply for " + t.Model()) }
	}
	box, err := harness.NewSandbox(ctx, root, target, harness.SandboxOptions{Tenants: tenants.Options{Names: tenants.Names(2), Responder: reply}})
	if err != nil {
		return fail("sandbox", "%v", err)
	}
	defer rep.Close(box, &err)
	step("sandbox", "%d tenants under %s", len(box.Set.Tenants), box.Root)
	sctx, cancel := context.WithTimeout(ctx, wait)
	g, err := Start(sctx, ctx, box)
	cancel()
	if err != nil {
		name := "start"
		if errors.Is(err, ErrProvision) {
			name = "provision"
		}
		return fail(name, "%v", err)
	}
	step("start", "ready at %s", g.Base())
	for _, t := range box.Set.Tenants {
		a := g.Access(t)
		step("provision", "%s: base path %s, models %v, %d header(s), ids %v", t.Name, a.BasePath, a.Models, len(a.Headers), a.IDs)
	}
	for _, t := range box.Set.Tenants {
		a := g.Access(t)
		before := len(t.Requests())
		cctx, cancel := context.WithTimeout(ctx, wait)
		r, err := g.Chat(cctx, harness.ChatRequest{Path: a.BasePath + g.ChatPath(), Key: a.Key, Model: a.Models[0], Text: "dry pass", Tools: true})
		cancel()
		switch {
		case err != nil:
			return fail("chat", "of %s: %v", t.Name, err)
		case r.Status != 200:
			return fail("chat", "of %s on %s: HTTP %d: %s", t.Name, a.BasePath+g.ChatPath(), r.Status, trim(r.Body))
		case len(t.Requests()) == before:
			return fail("chat", "of %s answered, but its provider saw no request: is its channel's base URL %s?", t.Name, t.ProviderURL())
		case !strings.Contains(r.Text, t.Model()):
			return fail("chat", "of %s: the reply does not carry its provider's answer: %s", t.Name, trim(r.Body))
		}
		step("chat", "%s: answered by its own provider (%d request(s))", t.Name, len(t.Requests())-before)
	}
	a, b := box.Set.Tenants[0], box.Set.Tenants[1]
	aa := g.Access(a)
	cctx, cancel := context.WithTimeout(ctx, wait)
	r, err := g.Chat(cctx, harness.ChatRequest{Path: aa.BasePath + g.ChatPath(), Key: aa.Key, Model: g.Access(b).Models[0], Text: "dry pass", Tools: true})
	cancel()
	if err != nil {
		return fail("foreign model", "%v", err)
	}
	if r.Status/100 == 2 {
		// A finding for the catalog; the dry pass only says so.
		fmt.Fprintf(w, "note  %-18s %s naming %s's model was answered (HTTP %d): the catalog will report it\n", "foreign model", a.Name, b.Name, r.Status)
	} else {
		step("foreign model", "%s naming %s's model: refused (HTTP %d)", a.Name, b.Name, r.Status)
	}
	note := func(name, format string, args ...any) {
		fmt.Fprintf(w, "note  %-18s %s\n", name, fmt.Sprintf(format, args...))
	}
	if target.ReplicatesGateway() && g.CanRestart() {
		if err := dryNodes(ctx, g, box, wait, fail, step); err != nil {
			return err
		}
	}
	if err := dryExtras(ctx, g, box, wait, dryReport{step: step, note: note, fail: fail}); err != nil {
		return err
	}
	if err := g.Stop(); err != nil {
		return fail("stop", "%v", err)
	}
	step("stop", "the gateway stopped")
	return nil
}

// dryNodes starts the gateway's other nodes (replicas: N) and has each
// tenant chat through each: answered by its own provider.
func dryNodes(ctx context.Context, g *Gateway, box *harness.Sandbox, wait time.Duration, fail func(string, string, ...any) error, step func(string, string, ...any)) error {
	sctx, cancel := context.WithTimeout(ctx, wait)
	nodes, err := g.StartNodes(sctx)
	cancel()
	if err != nil {
		return fail("nodes", "%v", err)
	}
	for _, n := range nodes[1:] {
		for _, t := range box.Set.Tenants {
			a := g.Access(t)
			before := len(t.Requests())
			cctx, cancel := context.WithTimeout(ctx, wait)
			r, err := g.ChatAt(cctx, n, harness.ChatRequest{Path: a.BasePath + g.ChatPath(), Key: a.Key, Model: a.Models[0], Text: "dry pass on " + n.Name(), Tools: true})
			cancel()
			switch {
			case err != nil:
				return fail("nodes", "chat of %s on %s: %v", t.Name, n.Name(), err)
			case r.Status != 200 || len(t.Requests()) == before || !strings.Contains(r.Text, t.Model()):
				return fail("nodes", "chat of %s on %s (%s): HTTP %d, %d request(s) on its provider: %s", t.Name, n.Name(), n.Base, r.Status, len(t.Requests())-before, trim(r.Body))
			}
		}
		step("nodes", "%s ready at %s: every tenant answered by its own provider", n.Name(), n.Base)
	}
	return nil
}

func trim(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
